// Checks the Kubernetes manifests of docker/ offline: each object against the Kubernetes API's
// JSON schemas (the npm package kubernetes-models, which validates with them), plus the rules
// docs/deployment.md promises: the "restricted" Pod Security Standard on every container, a
// grace period that covers preStop + drain, fully qualified image names, and a GPU request
// in the GPU manifest. Not part of the test suite.
//   npm install --prefix docker/.k8s-check kubernetes-models@5.1.0 yaml@2
//   node docker/check_manifests.js docker/k8s*.yaml
// K8S_CHECK_MODULES names another node_modules folder holding the two packages.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const MODULES = process.env.K8S_CHECK_MODULES || path.join(__dirname, '.k8s-check', 'node_modules');
const YAML = require(path.join(MODULES, 'yaml'));
// kubernetes-models is ES modules only: imported by file.
const load = (group, kind) =>
  import(pathToFileURL(path.join(MODULES, 'kubernetes-models', group, `${kind}.js`)).href)
    .then((m) => m[kind]);
const models = {
  'apps/v1/Deployment': () => load('apps/v1', 'Deployment'),
  'v1/Service': () => load('v1', 'Service'),
  'v1/PersistentVolumeClaim': () => load('v1', 'PersistentVolumeClaim'),
};

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

async function main() {
let failed = false;
for (const file of process.argv.slice(2)) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const problems = [];
  for (const doc of docs) {
    if (doc.errors.length) problems.push(`YAML: ${doc.errors[0].message}`);
    const obj = doc.toJSON();
    if (!obj) continue;
    const key = `${obj.apiVersion}/${obj.kind}`;
    const where = `${obj.kind} ${obj.metadata && obj.metadata.name}`;
    if (!models[key]) {
      problems.push(`${where}: no schema known for ${key}`);
      continue;
    }
    const Model = await models[key]();
    try {
      new Model(obj).validate();
    } catch (e) {
      problems.push(`${where}: schema: ${e.message}`);
    }
    if (obj.kind === 'Deployment') {
      const main = checkPod(where, obj.spec.template.spec, problems);
      if (/gpu/.test(file) && !((main.resources || {}).limits || {})['nvidia.com/gpu']) {
        problems.push(`${where}: no nvidia.com/gpu limit`);
      }
    }
    console.log(`${file}: ${where} (${key}) checked`);
  }
  for (const p of problems) console.log(`${file}: PROBLEM: ${p}`);
  if (problems.length) failed = true;
  else console.log(`${file}: OK (${docs.length} objects valid against the Kubernetes schemas)`);
}
process.exit(failed ? 1 : 0);
}

main();
