// Reference side of hf_tokenizer_oracle_test: encodes and decodes strings with
// @huggingface/tokenizers (the JS implementation of tokenizer.json).
//   node hf_tokenize.mjs <folder with tokenizer.json [+ tokenizer_config.json]> <in> <out>
// <in>: one JSON string per line. <out>: one JSON object per line with
//   plain:   ids without special tokens,
//   special: ids with add_special_tokens (every 8th line only),
//   text:    decode(plain) skipping special tokens, without clean-up of spaces.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";

const [dir, input, output] = process.argv.slice(2);
const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const configPath = path.join(dir, "tokenizer_config.json");
const config = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(json, config);
const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
lines.forEach((line, i) => {
  const text = JSON.parse(line);
  const plain = tokenizer.encode(text, { add_special_tokens: false }).ids;
  const decoded = plain.length === 0 ? "" : tokenizer.decode(plain, {
    skip_special_tokens: true, clean_up_tokenization_spaces: false });
  const result = { plain, text: decoded };
  if (i % 8 === 0) result.special = tokenizer.encode(text, { add_special_tokens: true }).ids;
  out.push(JSON.stringify(result));
});
fs.writeFileSync(output, out.join("\n") + "\n");
