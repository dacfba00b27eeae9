// Checks the container set-up of docker/ offline (ctest containers_check runs it):
// - Kubernetes manifests (k8s*.yaml): each object against the Kubernetes API's JSON schemas (the
//   npm package kubernetes-models, which validates with them), plus the rules
//   docs/deployment.md promises: the "restricted" Pod Security Standard on every container, a
//   grace period that covers preStop + drain, fully qualified image names, and a GPU request in
//   the GPU manifest;
// - Dockerfiles (Dockerfile*): one numeric USER uid:gid, created by groupadd/useradd with those
//   ids, the same in every image and equal to every manifest's runAsUser / runAsGroup / fsGroup
//   (a pod whose group differs from the image's cannot read files the image gives its group);
//   apt's lists and archives removed in the RUN that installs packages (a later RUN cannot
//   shrink the layer); every `podman build` / `buildah build` line in the comments passes
//   --format docker (the OCI format drops HEALTHCHECK).
// - Custom resources (InferencePool, HTTPRoute): against the small JSON Schemas of
//   docker/crd_schemas.js, written from the published API references; and in a file with an
//   InferencePool, the references between its objects (docker/fleet_refs.js: the pool's
//   selector and port, the picker's Service, the KV-event endpoint, topic and block size, the
//   route's backend).
//   node docker/check_manifests.js docker/Dockerfile docker/Dockerfile.cuda docker/k8s*.yaml
//   (k8s.yaml, k8s-gpu.yaml, k8s-fleet.yaml)
// The npm packages come from tests/containers (npm ci --prefix tests/containers, which
// tools/setup.sh runs); K8S_CHECK_MODULES names another node_modules folder holding them.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const MODULES = process.env.K8S_CHECK_MODULES ||
  path.join(__dirname, '..', 'tests', 'containers', 'node_modules');
const YAML = require(path.join(MODULES, 'yaml'));
const { crdValidators } = require('./crd_schemas.js');
const { checkFleetRefs } = require('./fleet_refs.js');
const crdValidator = crdValidators(MODULES);
// kubernetes-models is ES modules only: imported by file.
const load = (group, kind) =>
  import(pathToFileURL(path.join(MODULES, 'kubernetes-models', group, `${kind}.js`)).href)
    .then((m) => m[kind]);
const models = {
  'apps/v1/Deployment': () => load('apps/v1', 'Deployment'),
  'v1/Service': () => load('v1', 'Service'),
  'v1/PersistentVolumeClaim': () => load('v1', 'PersistentVolumeClaim'),
  'v1/ConfigMap': () => load('v1', 'ConfigMap'),
  'v1/ServiceAccount': () => load('v1', 'ServiceAccount'),
  'networking.k8s.io/v1/NetworkPolicy': () => load('networking.k8s.io/v1', 'NetworkPolicy'),
  'rbac.authorization.k8s.io/v1/Role': () => load('rbac.authorization.k8s.io/v1', 'Role'),
  'rbac.authorization.k8s.io/v1/RoleBinding': () =>
    load('rbac.authorization.k8s.io/v1', 'RoleBinding'),
};
// Deployments running one of banyan's images; only their uid/gid must be the images' (the
// endpoint picker runs its own image, as its own non-root user).
const runsBanyan = (spec) => spec.containers.some((c) => /\/banyan:[^/]+$/.test(c.image));

function checkPod(where, spec, problems) {
  const pod = spec.securityContext || {};
  if (pod.runAsNonRoot !== true) problems.push(`${where}: runAsNonRoot is not true`);
  if ((pod.seccompProfile || {}).type !== 'RuntimeDefault') {
    problems.push(`${where}: seccompProfile is not RuntimeDefault`);
  }
  const containers = [...(spec.initContainers || []), ...spec.containers];
  for (const c of containers) {
    const sc = c.securityContext || {};
    const at = `${where} container ${c.name}`;
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${at}: allowPrivilegeEscalation`);
    if (!((sc.capabilities || {}).drop || []).includes('ALL')) problems.push(`${at}: capabilities not dropped`);
    if (!/^[a-z0-9.-]+\.[a-z]+(:\d+)?\//.test(c.image)) problems.push(`${at}: image ${c.image} names no registry`);
    if (!((c.resources || {}).limits || {}).memory) problems.push(`${at}: no memory limit`);
  }
  const main = spec.containers[0];
  const drainArg = (main.args || []).find((a) => a.startsWith('--drain-timeout-ms='));
  const drainS = drainArg ? Number(drainArg.split('=')[1]) / 1000 : 25;  // configs/container.json
  const preStop = JSON.stringify(main.lifecycle || {}).match(/sleep (\d+)/);
  const need = drainS + (preStop ? Number(preStop[1]) : 0);
  if (!(spec.terminationGracePeriodSeconds > need)) {
    problems.push(`${where}: terminationGracePeriodSeconds ${spec.terminationGracePeriodSeconds} <= preStop + drain (${need} s)`);
  }
  for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
    if (!main[probe] || !main[probe].timeoutSeconds) problems.push(`${where}: ${probe} without timeoutSeconds`);
  }
  return main;
}

// A Dockerfile's instructions ({op, args}), continuation lines joined and comments left out,
// and its comment lines.
function parseDockerfile(text) {
  const instructions = [];
  const comments = [];
  let current = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#')) {
      comments.push(line);
      continue;
    }
    current += (current ? ' ' : '') + line.replace(/\\$/, '').trim();
    if (line.endsWith('\\')) continue;
    const m = current.match(/^([A-Za-z]+)\s+(.*)$/);
    if (m) instructions.push({ op: m[1].toUpperCase(), args: m[2] });
    current = '';
  }
  return { instructions, comments };
}

// Checks one Dockerfile; returns its user as {uid, gid} (null when it has none to compare).
function checkDockerfile(file, problems) {
  const { instructions, comments } = parseDockerfile(fs.readFileSync(file, 'utf8'));
  for (const c of comments) {
    if (/\b(podman|buildah)\s+(build|bud)\b/.test(c) && !/--format[ =]docker\b/.test(c)) {
      problems.push(`build command without --format docker (OCI drops HEALTHCHECK): ${c}`);
    }
  }
  const lastFrom = instructions.map((i) => i.op).lastIndexOf('FROM');
  const runtime = instructions.slice(lastFrom);
  for (const { op, args } of runtime) {
    if (op !== 'RUN' || !/apt-get\s+(-\S+\s+)*install\b/.test(args)) continue;
    if (!/rm -rf[^&;]*\/var\/lib\/apt\/lists/.test(args)) {
      problems.push('a RUN installs with apt but leaves /var/lib/apt/lists in its layer');
    }
    if (!/apt-get clean\b/.test(args) && !/rm -rf[^&;]*\/var\/cache\/apt\/archives/.test(args)) {
      problems.push('a RUN installs with apt but leaves /var/cache/apt/archives in its layer');
    }
  }
  const users = runtime.filter((i) => i.op === 'USER');
  if (users.length === 0) {
    problems.push('no USER in the final stage: the image runs as root');
    return null;
  }
  const user = users[users.length - 1].args.trim();
  const m = user.match(/^(\d+):(\d+)$/);
  if (!m) {
    problems.push(`USER ${user} is not numeric uid:gid (runAsNonRoot needs a numeric uid, and ` +
                  'the group must be stated to compare it with the manifests)');
    return null;
  }
  const id = { uid: Number(m[1]), gid: Number(m[2]) };
  const runs = runtime.filter((i) => i.op === 'RUN').map((i) => i.args).join(' && ');
  const useradd = runs.match(/useradd\b[^&;]*/);
  const groupadd = runs.match(/groupadd\b[^&;]*/);
  const flag = (cmd, name) => {
    const f = cmd && cmd[0].match(new RegExp(`--${name}[ =](\\d+)`));
    return f ? Number(f[1]) : null;
  };
  if (flag(useradd, 'uid') !== id.uid) problems.push(`useradd does not create uid ${id.uid}`);
  if (flag(useradd, 'gid') !== id.gid) problems.push(`useradd does not put the user in gid ${id.gid}`);
  if (flag(groupadd, 'gid') !== id.gid) problems.push(`groupadd does not create gid ${id.gid}`);
  console.log(`${file}: USER ${id.uid}:${id.gid}`);
  return id;
}

// The uid/gid a Deployment's containers run as must be the images'.
function checkIdentity(where, spec, image, problems) {
  const pod = spec.securityContext || {};
  for (const k of ['runAsUser', 'runAsGroup']) {
    if (pod[k] === undefined) problems.push(`${where}: pod securityContext has no ${k}`);
  }
  const want = { runAsUser: image.uid, runAsGroup: image.gid, fsGroup: image.gid };
  const contexts = [[`${where} pod`, pod]];
  for (const c of [...(spec.initContainers || []), ...spec.containers]) {
    contexts.push([`${where} container ${c.name}`, c.securityContext || {}]);
  }
  for (const [at, sc] of contexts) {
    for (const [k, v] of Object.entries(want)) {
      if (sc[k] !== undefined && sc[k] !== v) {
        problems.push(`${at}: ${k} ${sc[k]} differs from the image's ${v} (USER ${image.uid}:${image.gid})`);
      }
    }
  }
}

async function checkManifest(file, image, problems) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const objects = [];
  for (const doc of docs) {
    if (doc.errors.length) problems.push(`YAML: ${doc.errors[0].message}`);
    const obj = doc.toJSON();
    if (!obj) continue;
    const key = `${obj.apiVersion}/${obj.kind}`;
    const where = `${obj.kind} ${obj.metadata && obj.metadata.name}`;
    const crd = crdValidator(key);
    if (crd) {
      for (const e of crd(obj)) problems.push(`${where}: schema: ${e}`);
    } else if (!models[key]) {
      problems.push(`${where}: no schema known for ${key}`);
      continue;
    } else {
      const Model = await models[key]();
      try {
        new Model(obj).validate();
      } catch (e) {
        problems.push(`${where}: schema: ${e.message}`);
      }
    }
    objects.push(obj);
    if (obj.kind === 'Deployment') {
      const spec = obj.spec.template.spec;
      const main = checkPod(where, spec, problems);
      if (image && runsBanyan(spec)) checkIdentity(where, spec, image, problems);
      const gpu = /gpu/.test(file) || /\/banyan:cuda$/.test(main.image);
      if (gpu && !((main.resources || {}).limits || {})['nvidia.com/gpu']) {
        problems.push(`${where}: no nvidia.com/gpu limit`);
      }
    }
    console.log(`${file}: ${where} (${key}) checked`);
  }
  if (problems.length === 0 && objects.some((o) => o.kind === 'InferencePool')) {
    checkFleetRefs(objects, YAML, problems);
    console.log(`${file}: references between the fleet's objects checked`);
  }
  return docs.length;
}

async function main() {
  const files = process.argv.slice(2);
  const dockerfiles = files.filter((f) => path.basename(f).startsWith('Dockerfile'));
  const manifests = files.filter((f) => !dockerfiles.includes(f));
  let failed = false;
  const report = (file, problems, ok) => {
    for (const p of problems) console.log(`${file}: PROBLEM: ${p}`);
    if (problems.length) failed = true;
    else console.log(`${file}: OK (${ok})`);
  };
  let image = null;
  for (const file of dockerfiles) {
    const problems = [];
    const id = checkDockerfile(file, problems);
    if (id && image && (id.uid !== image.uid || id.gid !== image.gid)) {
      problems.push(`USER ${id.uid}:${id.gid} differs from ${image.file}'s ${image.uid}:${image.gid}`);
    }
    if (id && !image) image = { ...id, file };
    report(file, problems, 'user, apt layers, build format');
  }
  if (!image && manifests.length) {
    console.log('note: no Dockerfile with a uid:gid: the manifests\' ids are not compared with an image\'s');
  }
  for (const file of manifests) {
    const problems = [];
    const n = await checkManifest(file, image, problems);
    report(file, problems, `${n} objects valid against the Kubernetes and CRD schemas`);
  }
  if (files.length === 0) {
    console.log('usage: node check_manifests.js Dockerfile... k8s.yaml...');
    failed = true;
  }
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`check_manifests: ${e.stack || e}`);
  process.exit(1);
});
