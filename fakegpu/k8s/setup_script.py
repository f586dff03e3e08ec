"""The node setup script `fakegpu k8s render` writes (node/setup.sh): bash that makes one node a fake GPU node.

It installs FakeGPU where missing, has `fakegpu runtime install` write the runtime's front and the host inventory
(the one command that writes /etc/fakegpu/config.json; pointed at a scratch daemon.json and told not to signal
dockerd, it leaves Docker alone), writes the CDI spec, gives containerd or CRI-O the `fakegpu` runtime handler
through a drop-in, and labels the node. containerd reads a drop-in only when its config imports the folder: the
script asks containerd itself (`containerd config dump`) whether the handler is in, and stops with what to add
rather than editing config.toml.

Every value put in the script was checked by render.py and is shell-quoted here.
"""

from __future__ import annotations

import posixpath
import shlex

from fakegpu.k8s.node_config import RUNTIME_HANDLER, containerd_runtime, crio_runtime

CONTAINERD_DROPIN_DIR = "/etc/containerd/conf.d"
CONTAINERD_DROPIN = "99-fakegpu.toml"
CRIO_DROPIN = "/etc/crio/crio.conf.d/99-fakegpu.conf"
CDI_SPEC = "/etc/cdi/fakegpu.json"
VENV = "/opt/fakegpu"


def containerd_dropin(runtime_path: str, config_version: int) -> str:
    """A containerd drop-in: the handler's tables under the version line containerd needs to place them (an
    imported file without one is read as the old version 1 layout)."""
    return (f"# FakeGPU's runtime handler `{RUNTIME_HANDLER}` (fakegpu k8s render) for containerd "
            f"{'1.x' if config_version == 2 else '2.x'}:\n"
            f"# config version {config_version}, which must be the version of the config.toml importing this file.\n"
            f"version = {config_version}\n\n" + containerd_runtime(runtime_path, config_version))


def crio_dropin(runtime_path: str) -> str:
    return f"# FakeGPU's runtime handler `{RUNTIME_HANDLER}` (fakegpu k8s render)\n" + crio_runtime(runtime_path)


def _heredoc(path_expr: str, text: str, tag: str) -> str:
    # A quoted delimiter: bash copies the text as it is, no expansion.
    assert f"\n{tag}\n" not in f"\n{text}"
    return f"cat > {path_expr} <<'{tag}'\n{text}{tag}\n"


def render_setup_script(*, version: str, devices: str, runtime_path: str, config_file: str, label_key: str,
                        label_value: str, pip_spec: str) -> str:
    """The script; `config_file` is where the runtime (and the device plugin's DaemonSet) read the inventory."""
    q = shlex.quote
    label = f"{label_key}={label_value}"
    return f"""#!/usr/bin/env bash
# Makes this machine a fake GPU node for Kubernetes (fakegpu k8s render, fakegpu {version}). Run it as root on
# each node. Environment: NODE (the node's name; default: hostname), ENGINE (containerd or crio; default:
# whichever runs), FAKEGPU_PIP (what pip installs when fakegpu is missing), FAKEGPU_SETUP_ROOT (a folder that
# stands for / for every file written: a rehearsal, as the tests run it).
set -euo pipefail

DEVICES={q(devices)}
RUNTIME_PATH={q(runtime_path)}
NODE_LABEL={q(label)}
FAKEGPU_PIP=${{FAKEGPU_PIP:-{q(pip_spec)}}}
NODE=${{NODE:-$(hostname)}}
ROOT=${{FAKEGPU_SETUP_ROOT:-}}
# The device plugin's DaemonSet reads the runtime's config at its default place: keep it there.
export FAKEGPU_CONFIG="$ROOT"{q(config_file)}

say() {{ echo "fakegpu setup: $*"; }}
die() {{ echo "fakegpu setup: error: $*" >&2; exit 1; }}

[ "$(id -u)" -eq 0 ] || die "run this as root (sudo bash $0)"

# 1. FakeGPU: the one on PATH, else a virtual environment of its own (distributions' pythons refuse a global pip)
if command -v fakegpu >/dev/null 2>&1; then
  FAKEGPU=$(command -v fakegpu)
elif [ -x "$ROOT"{VENV}/bin/fakegpu ]; then
  FAKEGPU="$ROOT"{VENV}/bin/fakegpu
else
  command -v python3 >/dev/null 2>&1 || die "python3 is needed to install FakeGPU"
  say "installing $FAKEGPU_PIP into $ROOT{VENV}"
  python3 -m venv "$ROOT"{VENV}
  "$ROOT"{VENV}/bin/pip install --quiet "$FAKEGPU_PIP"
  FAKEGPU="$ROOT"{VENV}/bin/fakegpu
fi
say "using $("$FAKEGPU" --version) ($FAKEGPU)"

# 2. The runtime's front (what the engine runs as the handler) and the host inventory in /etc/fakegpu/config.json.
# `runtime install` is the command that writes both; Docker is left alone: its daemon.json edit goes to a scratch
# file and dockerd is not signalled.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$FAKEGPU" runtime install --devices "$DEVICES" --front-dir "$ROOT$(dirname "$RUNTIME_PATH")" \\
  --config "$scratch/daemon.json" --no-reload
[ -x "$ROOT$RUNTIME_PATH" ] || die "$ROOT$RUNTIME_PATH was not written"

# 3. The CDI spec, for engines that apply CDI devices (containerd 1.7+, CRI-O, podman)
mkdir -p "$ROOT"{posixpath.dirname(CDI_SPEC)}
"$FAKEGPU" cdi generate --devices "$DEVICES" --output "$ROOT"{CDI_SPEC}

# 4. The engine's runtime handler `{RUNTIME_HANDLER}`
if [ -z "${{ENGINE:-}}" ]; then
  if command -v crio >/dev/null 2>&1 && systemctl is-active --quiet crio 2>/dev/null; then ENGINE=crio
  elif command -v containerd >/dev/null 2>&1; then ENGINE=containerd
  else die "neither containerd nor CRI-O found; set ENGINE=containerd or ENGINE=crio"
  fi
fi

restart() {{
  if command -v systemctl >/dev/null 2>&1; then
    systemctl restart "$1"
    say "restarted $1"
  else
    say "restart $1 yourself (no systemctl here) for the handler to be read"
  fi
}}

case "$ENGINE" in
containerd)
  CONF=$ROOT/etc/containerd/config.toml
  DROPIN_DIR=$ROOT{CONTAINERD_DROPIN_DIR}
  version=$(containerd --version | awk '{{print $3}}')
  version=${{version#v}}
  if [ -f "$CONF" ]; then
    config_version=$(sed -n 's/^[[:space:]]*version[[:space:]]*=[[:space:]]*\\([0-9]\\+\\).*/\\1/p' "$CONF" | head -n1)
    [ -n "$config_version" ] || die "$CONF has no version line, so containerd reads it in the old version 1 \\
layout; migrate it first (containerd config migrate), then run this again"
  elif [ "${{version%%.*}}" -ge 2 ] 2>/dev/null; then
    config_version=3
  else
    config_version=2
  fi
  mkdir -p "$DROPIN_DIR"
  case "$config_version" in
  2)
{_heredoc('"$DROPIN_DIR/' + CONTAINERD_DROPIN + '"', containerd_dropin(runtime_path, 2), "FAKEGPU_CONTAINERD_V2")}    ;;
  3)
{_heredoc('"$DROPIN_DIR/' + CONTAINERD_DROPIN + '"', containerd_dropin(runtime_path, 3), "FAKEGPU_CONTAINERD_V3")}    ;;
  *) die "$CONF: config version $config_version is neither 2 (containerd 1.x) nor 3 (2.x)" ;;
  esac
  say "wrote $DROPIN_DIR/{CONTAINERD_DROPIN} (config version $config_version, containerd $version)"
  # containerd reads drop-ins only through `imports` (2.2+ imports $DROPIN_DIR by default when no config.toml
  # exists): ask it whether the handler is in rather than guess from the TOML.
  dump_args=()
  if [ -f "$CONF" ]; then dump_args=(--config "$CONF"); fi
  # captured first: grep -q leaving early would fail the pipe under pipefail
  dump=$(containerd ${{dump_args[@]+"${{dump_args[@]}}"}} config dump 2>/dev/null || true)
  if ! grep -q 'runtimes\\.{RUNTIME_HANDLER}[]"'"'"'.]' <<<"$dump"; then
    if [ -f "$CONF" ]; then
      die "containerd does not read $DROPIN_DIR; add this line at the top of $CONF (before any [table]), merged \\
with any imports line already there, then run this again:
  imports = [\\"$DROPIN_DIR/*.toml\\"]"
    fi
    die "containerd $version does not read $DROPIN_DIR without a config; create $CONF with these two lines, then \\
run this again:
  version = $config_version
  imports = [\\"$DROPIN_DIR/*.toml\\"]"
  fi
  restart containerd
  ;;
crio)
  mkdir -p "$ROOT"{posixpath.dirname(CRIO_DROPIN)}
{_heredoc('"$ROOT"' + CRIO_DROPIN, crio_dropin(runtime_path), "FAKEGPU_CRIO")}  say "wrote $ROOT{CRIO_DROPIN}"
  restart crio
  ;;
*) die "ENGINE=$ENGINE: containerd or crio" ;;
esac

# 5. The node label the RuntimeClass and the device plugin's DaemonSet select
if command -v kubectl >/dev/null 2>&1 && kubectl get node "$NODE" >/dev/null 2>&1; then
  kubectl label node "$NODE" "$NODE_LABEL" --overwrite
else
  say "label the node from a machine with cluster access: kubectl label node $NODE $NODE_LABEL --overwrite"
fi
say "done; from a machine with cluster access: kubectl apply -f cluster.yaml (the RuntimeClass and the device plugin)"
"""
