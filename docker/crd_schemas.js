// JSON Schemas of the custom resources the fleet manifest (docker/k8s-fleet.yaml) uses, for
// docker/check_manifests.js. kubernetes-models has no schemas for them, so these are written
// here from the published API references, and cover only the fields banyan's manifests use:
// - InferencePool, inference.networking.k8s.io/v1: the Gateway API Inference Extension's API
//   reference (spec.selector.matchLabels, spec.targetPorts[].number (at most 8, unique),
//   spec.appProtocol, spec.endpointPickerRef {group, kind, name, port.number, failureMode}).
// - HTTPRoute, gateway.networking.k8s.io/v1: the Gateway API reference (parentRefs, rules with
//   path matches and backendRefs).
// Unlike kubernetes-models these reject unknown fields (additionalProperties: false), so a
// field misspelt or moved between API versions (v1alpha2's targetPortNumber, extensionRef) is
// reported. A field the APIs have but these schemas lack must be added here before use.
'use strict';

const name = { type: 'string', minLength: 1, maxLength: 253, pattern: '^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$' };
const labels = {
  type: 'object',
  minProperties: 1,
  additionalProperties: { type: 'string', maxLength: 63 },
};
const port = { type: 'integer', minimum: 1, maximum: 65535 };
const metadata = {
  type: 'object',
  required: ['name'],
  properties: { name, namespace: name, labels, annotations: { type: 'object' } },
  additionalProperties: false,
};

const inferencePool = {
  type: 'object',
  required: ['apiVersion', 'kind', 'metadata', 'spec'],
  additionalProperties: false,
  properties: {
    apiVersion: { const: 'inference.networking.k8s.io/v1' },
    kind: { const: 'InferencePool' },
    metadata,
    spec: {
      type: 'object',
      required: ['selector', 'targetPorts', 'endpointPickerRef'],
      additionalProperties: false,
      properties: {
        selector: {
          type: 'object',
          required: ['matchLabels'],
          additionalProperties: false,
          properties: { matchLabels: labels },
        },
        targetPorts: {
          type: 'array',
          minItems: 1,
          maxItems: 8,
          uniqueItems: true,
          items: {
            type: 'object',
            required: ['number'],
            additionalProperties: false,
            properties: { number: port },
          },
        },
        appProtocol: { enum: ['http', 'kubernetes.io/h2c'] },
        endpointPickerRef: {
          type: 'object',
          required: ['name', 'port'],
          additionalProperties: false,
          properties: {
            group: { type: 'string' },
            kind: { const: 'Service' },
            name,
            port: {
              type: 'object',
              required: ['number'],
              additionalProperties: false,
              properties: { number: port },
            },
            failureMode: { enum: ['FailOpen', 'FailClose'] },
          },
        },
      },
    },
  },
};

const httpRoute = {
  type: 'object',
  required: ['apiVersion', 'kind', 'metadata', 'spec'],
  additionalProperties: false,
  properties: {
    apiVersion: { const: 'gateway.networking.k8s.io/v1' },
    kind: { const: 'HTTPRoute' },
    metadata,
    spec: {
      type: 'object',
      required: ['parentRefs', 'rules'],
      additionalProperties: false,
      properties: {
        parentRefs: {
          type: 'array',
          minItems: 1,
          items: {
            type: 'object',
            required: ['name'],
            additionalProperties: false,
            properties: {
              group: { type: 'string' }, kind: { type: 'string' }, name,
              namespace: name, sectionName: { type: 'string' },
            },
          },
        },
        hostnames: { type: 'array', items: { type: 'string' } },
        rules: {
          type: 'array',
          minItems: 1,
          maxItems: 16,
          items: {
            type: 'object',
            additionalProperties: false,
            properties: {
              matches: {
                type: 'array',
                items: {
                  type: 'object',
                  additionalProperties: false,
                  properties: {
                    path: {
                      type: 'object',
                      additionalProperties: false,
                      properties: {
                        type: { enum: ['Exact', 'PathPrefix', 'RegularExpression'] },
                        value: { type: 'string', pattern: '^/' },
                      },
                    },
                  },
                },
              },
              backendRefs: {
                type: 'array',
                minItems: 1,
                items: {
                  type: 'object',
                  required: ['name'],
                  additionalProperties: false,
                  properties: {
                    group: { type: 'string' }, kind: { type: 'string' }, name,
                    namespace: name, port, weight: { type: 'integer', minimum: 0 },
                  },
                },
              },
              timeouts: {
                type: 'object',
                additionalProperties: false,
                properties: { request: { type: 'string' }, backendRequest: { type: 'string' } },
              },
            },
          },
        },
      },
    },
  },
};

// Returns a function (object) -> list of messages, one per schema violation, for the kinds
// above keyed by `${apiVersion}/${kind}`; null for other kinds.
function crdValidators(modules) {
  const Ajv = require(require('node:path').join(modules, 'ajv'));
  const ajv = new Ajv({ allErrors: true });
  const compiled = {
    'inference.networking.k8s.io/v1/InferencePool': ajv.compile(inferencePool),
    'gateway.networking.k8s.io/v1/HTTPRoute': ajv.compile(httpRoute),
  };
  return (key) => {
    const validate = compiled[key];
    if (!validate) return null;
    return (obj) => (validate(obj) ? [] : validate.errors.map((e) =>
      `${e.instancePath || '/'} ${e.message}` +
      (e.params && e.params.additionalProperty ? ` (${e.params.additionalProperty})` : '')));
  };
}

module.exports = { crdValidators };
