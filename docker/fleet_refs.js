// Cross-references of a routed fleet manifest (docker/k8s-fleet.yaml), for
// docker/check_manifests.js. Each schema-valid object can still point at nothing; these checks
// follow the names and ports from object to object, within one file:
//   InferencePool.selector      -> the pod labels of a Deployment (the model servers)
//   InferencePool.targetPorts   -> containerPorts of those pods
//   InferencePool.endpointPickerRef -> a Service (name and port) selecting the picker's pods
//   HTTPRoute backendRefs (kind InferencePool) -> an InferencePool of the file
//   banyand's --kv-events-config endpoint -> the picker's Service and port, whose target is the
//     container port the picker's config (ConfigMap, --config-file) binds in kvEventsConfig;
//     the topic must begin with the config's topicFilter, and the config's blockSize must be
//     banyand's --chunk-size (else the picker hashes prompts in other blocks than the events');
//     a NetworkPolicy on the picker's pods must admit the model servers' pods to that port.
// Every message names both ends, so a broken reference says what it looked for and what exists.
'use strict';

const POOL_GROUP = 'inference.networking.k8s.io';
const show = (labels) => JSON.stringify(labels || {});
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => (labels || {})[k] === v);

const podLabels = (d) => ((d.spec.template || {}).metadata || {}).labels || {};
const podSpec = (d) => d.spec.template.spec;
const containerPorts = (d) => podSpec(d).containers.flatMap((c) => c.ports || []);

// The container port number a Service port reaches in the Deployment d (targetPort is a number
// or a port name; absent means the service port itself). null when d has no such port.
function resolveTargetPort(servicePort, d) {
  const target = servicePort.targetPort === undefined ? servicePort.port : servicePort.targetPort;
  const p = containerPorts(d).find((cp) => cp.containerPort === target || cp.name === target);
  return p ? p.containerPort : null;
}

// The value of --name=VALUE or --name VALUE in args.
function argValue(args, name) {
  for (let i = 0; i < (args || []).length; i++) {
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
    if (args[i] === `--${name}`) return args[i + 1];
  }
  return undefined;
}

// The picker's EndpointPickerConfig: the ConfigMap mounted where --config-file points.
function pickerConfig(picker, byKind, YAML, problems) {
  const where = `Deployment ${picker.metadata.name}`;
  const main = podSpec(picker).containers[0];
  const file = argValue(main.args, 'config-file');
  if (!file) {
    problems.push(`${where}: no --config-file: the picker would run without the prefix-cache scorer`);
    return null;
  }
  const mount = (main.volumeMounts || []).find((m) => file.startsWith(`${m.mountPath}/`));
  const volume = mount && (podSpec(picker).volumes || []).find((v) => v.name === mount.name);
  const cmName = volume && volume.configMap && volume.configMap.name;
  const cm = (byKind.ConfigMap || []).find((c) => c.metadata.name === cmName);
  const key = mount && file.slice(mount.mountPath.length + 1);
  if (!cm || !(cm.data || {})[key]) {
    problems.push(`${where}: --config-file ${file} is no key of a ConfigMap of this file mounted there`);
    return null;
  }
  return YAML.parse(cm.data[key]);
}

function checkKvEvents(server, picker, pickerService, config, policies, problems) {
  const where = `Deployment ${server.metadata.name}`;
  const main = podSpec(server).containers[0];
  const raw = argValue(main.args, 'kv-events-config');
  if (!raw) {
    problems.push(`${where}: no --kv-events-config: the picker's prefix-cache scorer would see no events`);
    return;
  }
  let ev;
  try {
    ev = JSON.parse(raw);
  } catch (e) {
    problems.push(`${where}: --kv-events-config is not JSON: ${e.message}`);
    return;
  }
  if (ev.enable_kv_cache_events !== true) problems.push(`${where}: enable_kv_cache_events is not true`);
  const m = /^tcp:\/\/([^:/]+):(\d+)$/.exec(ev.endpoint || '');
  if (!m || m[1] === '*' || ev.bind === true) {
    problems.push(`${where}: kv-events endpoint ${ev.endpoint} does not connect to the picker ` +
                  `(tcp://${pickerService.metadata.name}.<namespace>.svc.cluster.local:PORT)`);
    return;
  }
  const host = m[1].split('.')[0];
  const port = Number(m[2]);
  if (host !== pickerService.metadata.name) {
    problems.push(`${where}: kv-events endpoint host ${m[1]} names Service ${host}, not the ` +
                  `picker's Service ${pickerService.metadata.name}`);
    return;
  }
  const sp = pickerService.spec.ports.find((p) => p.port === port);
  if (!sp) {
    problems.push(`${where}: kv-events endpoint port ${port} is no port of Service ` +
                  `${host} (${pickerService.spec.ports.map((p) => p.port).join(', ')})`);
    return;
  }
  const containerPort = resolveTargetPort(sp, picker);
  const scorer = ((config || {}).plugins || []).find((p) => p.type === 'precise-prefix-cache-scorer');
  if (!scorer) {
    problems.push(`picker config: no precise-prefix-cache-scorer plugin: the events are not read`);
    return;
  }
  const params = scorer.parameters || {};
  const kv = params.kvEventsConfig || {};
  const bind = /^tcp:\/\/\*:(\d+)$/.exec(kv.zmqEndpoint || '');
  if (!bind || Number(bind[1]) !== containerPort) {
    problems.push(`picker config: kvEventsConfig.zmqEndpoint ${kv.zmqEndpoint} does not bind ` +
                  `port ${containerPort}, where banyand's events arrive (${ev.endpoint} -> ` +
                  `Service ${host} port ${port} -> container port ${containerPort})`);
  }
  if (containerPort !== null) {
    checkEventIngress(server, picker, containerPort, policies, problems);
  }
  if (!(ev.topic || '').startsWith(kv.topicFilter || '')) {
    problems.push(`${where}: kv-events topic ${ev.topic} does not begin with the picker's ` +
                  `topicFilter ${kv.topicFilter}: the picker drops every batch`);
  }
  const chunk = Number(argValue(main.args, 'chunk-size') || argValue(main.args, 'block-size'));
  const block = (params.tokenProcessorConfig || {}).blockSize;
  if (chunk !== block) {
    problems.push(`${where}: --chunk-size ${chunk || '(not set)'} differs from the picker's ` +
                  `tokenProcessorConfig.blockSize ${block}: prompts would be hashed in other blocks`);
  }
  const defined = new Set((config.plugins || []).map((p) => p.name || p.type));
  for (const profile of config.schedulingProfiles || []) {
    for (const ref of profile.plugins || []) {
      if (!defined.has(ref.pluginRef)) {
        problems.push(`picker config: profile ${profile.name} uses ${ref.pluginRef}, which no plugin defines`);
      }
    }
  }
}

// A NetworkPolicy that selects the picker's pods for ingress must let the model servers' pods
// reach the port the events arrive on, or the picker never hears of a block.
function checkEventIngress(server, picker, eventPort, policies, problems) {
  for (const np of policies) {
    const types = np.spec.policyTypes || ['Ingress'];
    if (!types.includes('Ingress') || !matches(np.spec.podSelector.matchLabels, podLabels(picker))) continue;
    const named = containerPorts(picker).find((p) => p.containerPort === eventPort) || {};
    const admits = (np.spec.ingress || []).some((rule) => {
      const portOk = !rule.ports || rule.ports.some((p) => p.port === eventPort || p.port === named.name);
      const fromOk = !rule.from || rule.from.some((f) =>
        f.podSelector && !f.namespaceSelector && matches(f.podSelector.matchLabels, podLabels(server)));
      return portOk && fromOk;
    });
    if (!admits) {
      problems.push(`NetworkPolicy ${np.metadata.name}: no ingress rule admits Deployment ` +
                    `${server.metadata.name}'s pods to the picker's event port ${eventPort}`);
    }
  }
}

// objects: every object of one manifest file. Adds a message to problems per broken reference.
function checkFleetRefs(objects, YAML, problems) {
  const byKind = {};
  for (const o of objects) (byKind[o.kind] = byKind[o.kind] || []).push(o);
  const pools = byKind.InferencePool || [];
  const deployments = byKind.Deployment || [];
  const services = byKind.Service || [];
  for (const pool of pools) {
    const where = `InferencePool ${pool.metadata.name}`;
    const selector = pool.spec.selector.matchLabels;
    const servers = deployments.filter((d) => matches(selector, podLabels(d)));
    if (servers.length === 0) {
      problems.push(`${where}: selector ${show(selector)} matches no Deployment's pod labels (` +
                    deployments.map((d) => `${d.metadata.name}: ${show(podLabels(d))}`).join('; ') + ')');
    }
    for (const d of servers) {
      const have = containerPorts(d).map((p) => p.containerPort);
      for (const tp of pool.spec.targetPorts) {
        if (!have.includes(tp.number)) {
          problems.push(`${where}: targetPort ${tp.number} is no containerPort of Deployment ` +
                        `${d.metadata.name} (${have.join(', ')})`);
        }
      }
    }
    const ref = pool.spec.endpointPickerRef;
    const svc = services.find((s) => s.metadata.name === ref.name);
    if (!svc) {
      problems.push(`${where}: endpointPickerRef names Service ${ref.name}, which this file lacks ` +
                    `(has: ${services.map((s) => s.metadata.name).join(', ')})`);
      continue;
    }
    const sp = svc.spec.ports.find((p) => p.port === ref.port.number);
    if (!sp) {
      problems.push(`${where}: endpointPickerRef port ${ref.port.number} is no port of Service ` +
                    `${svc.metadata.name} (${svc.spec.ports.map((p) => p.port).join(', ')})`);
    }
    const picker = deployments.find((d) => matches(svc.spec.selector, podLabels(d)));
    if (!picker) {
      problems.push(`Service ${svc.metadata.name}: selector ${show(svc.spec.selector)} matches no Deployment's pods`);
      continue;
    }
    if (servers.includes(picker)) problems.push(`${where}: the picker's pods are in the pool`);
    if (sp && resolveTargetPort(sp, picker) === null) {
      problems.push(`Service ${svc.metadata.name}: port ${sp.port} targets ${sp.targetPort}, no ` +
                    `port of Deployment ${picker.metadata.name}`);
    }
    const config = pickerConfig(picker, byKind, YAML, problems);
    for (const d of servers) {
      checkKvEvents(d, picker, svc, config, byKind.NetworkPolicy || [], problems);
    }
  }
  for (const route of byKind.HTTPRoute || []) {
    const refs = route.spec.rules.flatMap((r) => r.backendRefs || []);
    for (const b of refs.filter((r) => r.kind === 'InferencePool')) {
      if (b.group !== POOL_GROUP) {
        problems.push(`HTTPRoute ${route.metadata.name}: backendRef ${b.name} has group ` +
                      `${b.group}, not ${POOL_GROUP}`);
      }
      if (!pools.some((p) => p.metadata.name === b.name)) {
        problems.push(`HTTPRoute ${route.metadata.name}: backendRef names InferencePool ${b.name}, ` +
                      `which this file lacks (has: ${pools.map((p) => p.metadata.name).join(', ')})`);
      }
    }
    if (pools.length && !refs.some((r) => r.kind === 'InferencePool')) {
      problems.push(`HTTPRoute ${route.metadata.name}: no backendRef names an InferencePool`);
    }
  }
}

module.exports = { checkFleetRefs };
