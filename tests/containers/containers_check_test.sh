#!/bin/sh
# ctest containers_check: docker/check_manifests.js on the repository's Dockerfiles and
# Kubernetes manifests (Kubernetes schemas, the restricted security context, one uid:gid across
# images and manifests, apt layers, the documented build format; the fleet's custom resources
# and the references between its objects), then on copies broken one way each, every one of
# which must fail with its own message, so the check itself is tested; and
# docker/runtime-packages.sh's --dlopen (libraries the binaries open at run time).
#   containers_check_test.sh SOURCE_DIR
# Exits 77 (skip) only without node; missing npm packages fail (npm ci --prefix tests/containers,
# which tools/setup.sh runs).
set -u
src=$1
if ! command -v node >/dev/null 2>&1; then
  echo "containers_check: SKIPPED: node is not installed"
  exit 77
fi
modules=$src/tests/containers/node_modules
if [ ! -d "$modules/kubernetes-models" ] || [ ! -d "$modules/yaml" ]; then
  echo "containers_check: FAILED: $modules lacks kubernetes-models or yaml:" \
       "run npm ci --prefix tests/containers (tools/setup.sh does)"
  exit 1
fi
export K8S_CHECK_MODULES=$modules
check="node $src/docker/check_manifests.js"
d=$src/docker
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

echo "== the repository's files"
if ! $check "$d/Dockerfile" "$d/Dockerfile.cuda" "$d/k8s.yaml" "$d/k8s-gpu.yaml" \
     "$d/k8s-fleet.yaml"; then
  echo "FAIL: the repository's container files do not pass"
  failures=$((failures + 1))
fi

# broken NAME EXPECTED FILES...: the check must fail and print EXPECTED.
broken() {
  name=$1 expected=$2
  shift 2
  if $check "$@" >"$tmp/out" 2>&1; then
    echo "FAIL: $name: the check passed"; cat "$tmp/out"; failures=$((failures + 1))
  elif ! grep -q -F -e "$expected" "$tmp/out"; then
    echo "FAIL: $name: no '$expected' in:"; cat "$tmp/out"; failures=$((failures + 1))
  else
    echo "ok: $name: $(grep -F -e "$expected" "$tmp/out" | head -n 1)"
  fi
}

mkdir -p "$tmp/a" "$tmp/b" "$tmp/c" "$tmp/d"
sed 's/runAsGroup: 10001/runAsGroup: 999/' "$d/k8s.yaml" >"$tmp/k8s.yaml"
broken "manifest group differs from the image's" "runAsGroup 999 differs from the image's 10001" \
  "$d/Dockerfile" "$tmp/k8s.yaml"
sed 's/fsGroup: 10001/fsGroup: 2000/' "$d/k8s-gpu.yaml" >"$tmp/k8s-gpu.yaml"
broken "fsGroup differs from the image's" "fsGroup 2000 differs" "$d/Dockerfile.cuda" "$tmp/k8s-gpu.yaml"
sed 's/^USER .*/USER 10001/' "$d/Dockerfile" >"$tmp/a/Dockerfile"
broken "USER without a group" "is not numeric uid:gid" "$tmp/a/Dockerfile"
sed 's/useradd --system --uid 10001 --gid 10001/useradd --system --uid 10001/' "$d/Dockerfile" \
  >"$tmp/b/Dockerfile"
broken "useradd leaves the group to the system (999)" "useradd does not put the user in gid 10001" \
  "$tmp/b/Dockerfile"
sed 's/^USER .*/USER 10002:10002/; s/10001/10002/g' "$d/Dockerfile.cuda" >"$tmp/a/Dockerfile.cuda"
broken "images with different users" "differs from" "$d/Dockerfile" "$tmp/a/Dockerfile.cuda"
sed '/apt-get clean/d; s|/var/cache/apt/archives/\*.deb ||' "$d/Dockerfile" >"$tmp/c/Dockerfile"
broken "apt archives left in the layer" "leaves /var/cache/apt/archives" "$tmp/c/Dockerfile"
sed 's/build --format docker -f/build -f/' "$d/Dockerfile" >"$tmp/d/Dockerfile"
broken "podman build without --format docker" "without --format docker" "$tmp/d/Dockerfile"
sed 's/containerPort: 8000/containerPort: "8000x"/' "$d/k8s.yaml" >"$tmp/schema.yaml"
broken "schema violation" "must be integer" "$tmp/schema.yaml"
sed 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/' "$d/k8s.yaml" >"$tmp/priv.yaml"
broken "privilege escalation" "allowPrivilegeEscalation" "$tmp/priv.yaml"

# The fleet (docker/k8s-fleet.yaml): each copy breaks one reference or one CRD field.
f=$d/k8s-fleet.yaml
# fleet NAME EXPECTED SED-SCRIPT: the fleet manifest edited by SED-SCRIPT must fail with EXPECTED;
# an edit that changes nothing is itself a failure (the test would prove nothing).
fleet() {
  sed "$3" "$f" >"$tmp/fleet.yaml"
  if cmp -s "$f" "$tmp/fleet.yaml"; then
    echo "FAIL: $1: the edit '$3' changed nothing"; failures=$((failures + 1)); return
  fi
  broken "fleet: $1" "$2" "$tmp/fleet.yaml"
}
fleet "pool selector matches no pod" "selector {\"app\":\"banyand-gpu\"} matches no Deployment's pod labels" \
  '/^kind: InferencePool/,/^---/s/matchLabels: {app: banyand}/matchLabels: {app: banyand-gpu}/'
fleet "pool targetPort is not the container's" "targetPort 8001 is no containerPort of Deployment banyand" \
  's/    - number: 8000/    - number: 8001/'
fleet "picker ref names no Service" "endpointPickerRef names Service banyan-picker, which this file lacks" \
  '/endpointPickerRef:/,/failureMode/s/name: banyan-epp/name: banyan-picker/'
fleet "picker ref port is not the Service's" "endpointPickerRef port 9003 is no port of Service banyan-epp" \
  's/port: {number: 9002}/port: {number: 9003}/'
fleet "route backend names no pool" "backendRef names InferencePool banyand-pool, which this file lacks" \
  '/kind: InferencePool$/{n;s/name: banyand/name: banyand-pool/}'
fleet "events sent to another Service" "names Service banyan-router, not the picker's Service banyan-epp" \
  's|tcp://banyan-epp\.|tcp://banyan-router.|'
fleet "picker subscribes on another port" "zmqEndpoint tcp://*:5558 does not bind port 5557" \
  's|zmqEndpoint: "tcp://\*:5557"|zmqEndpoint: "tcp://*:5558"|'
fleet "topic outside the picker's filter" "does not begin with the picker's topicFilter kv@" \
  's/"topic": "kv@/"topic": "banyan@/'
fleet "block size differs" "--chunk-size 32 differs from the picker's tokenProcessorConfig.blockSize 64" \
  's/--chunk-size=64/--chunk-size=32/'
fleet "network policy shuts out the events" "no ingress rule admits Deployment banyand's pods to the picker's event port 5557" \
  '/^kind: NetworkPolicy/,/^---/s/matchLabels: {app: banyand}/matchLabels: {app: banyand-gpu}/'
fleet "v1alpha2 pool field" "must NOT have additional properties (targetPortNumber)" \
  's/^  targetPorts:$/  targetPortNumber: 8000\n  targetPorts:/'

# docker/runtime-packages.sh: a library named after --dlopen counts although no binary links it
# (the CUDA image installs cuBLAS this way: the backend opens it on first use).
echo "== runtime-packages.sh --dlopen"
zmq=$(ldconfig -p | awk '/libzmq\.so\.5 .*x86-64/ {print $NF; exit}')
if [ -z "$zmq" ]; then
  echo "FAIL: no libzmq.so.5 on this machine (tools/setup.sh installs libzmq3-dev)"
  failures=$((failures + 1))
else
  without=$(sh "$d/runtime-packages.sh" /bin/true)
  with=$(sh "$d/runtime-packages.sh" /bin/true --dlopen "$zmq")
  case $without in *libzmq5*) echo "FAIL: /bin/true alone gave libzmq5"; failures=$((failures + 1)) ;; esac
  case $with in
    *libzmq5*) echo "ok: $zmq after --dlopen gives libzmq5" ;;
    *) echo "FAIL: --dlopen $zmq did not give libzmq5: $with"; failures=$((failures + 1)) ;;
  esac
fi

if [ "$failures" -ne 0 ]; then
  echo "containers_check: $failures failures"
  exit 1
fi
echo "containers_check: OK"
