"""Pure: the configuration files of the test node's daemons (containerd, CNI, kubelet, kube-proxy, CoreDNS).

Each setting that is not a default is here because the node failed without it on these machines
(see shared/peers/NODE.md): cgroup v1 with the cgroupfs driver, no CAP_SYS_RESOURCE, no image
registry, no AppArmor. Every path lives under the node's scratch folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# The host of the images act_runner's default labels run jobs in (reconciler/model/labels.py).
STAND_IN_REGISTRY = "docker.gitea.com"
# The port on the node's address where a test may serve a registry the kubelet pulls from over plain
# HTTP (containerd's hosts.toml says so): a release's image and chart (tests/e2e/test_helm.py).
NODE_REGISTRY_PORT = 5000


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the node's daemons keep their state, and its addresses."""

    root: Path
    node_name: str
    node_ip: str
    pod_cidr: str
    bridge: str
    pause_image: str

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def registry_hosts_dir(self) -> Path:
        return self.root / "containerd" / "certs.d"


def containerd_toml(layout: Layout) -> str:
    """containerd 1.6's config (version 2) with the CRI plugin set up for this machine."""
    base = layout.root / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{layout.containerd_socket}"
[ttrpc]
  address = "{base}/containerd.sock.ttrpc"
[debug]
  level = "warn"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
[{cri}]
  sandbox_image = "{layout.pause_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{base}/runc"
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{layout.cni_conf_dir}"
[{cri}.registry]
  config_path = "{layout.registry_hosts_dir}"
"""


def registry_hosts(layout: Layout) -> tuple[str, str]:
    """containerd's hosts.toml for the node's registry (NODE_REGISTRY_PORT): (its folder's name, its text).
    Plain HTTP, as users' mirrors inside a cluster often are; every other registry is as containerd has it."""
    address = f"{layout.node_ip}:{NODE_REGISTRY_PORT}"
    return (
        address,
        f"""server = "http://{address}"

[host."http://{address}"]
  capabilities = ["pull", "resolve"]
""",
    )


def cni_conflist(layout: Layout) -> str:
    """A bridge network with host-local addresses; Pods route through the host (isGateway)."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "grs-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": layout.bridge,
                    "isGateway": True,
                    "hairpinMode": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": layout.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(layout.root / "cni" / "ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        },
        indent=1,
    )


def kubelet_config(layout: Layout, *, ca: Path, cert: Path, key: Path, port: int, healthz_port: int) -> str:
    """The KubeletConfiguration (JSON is YAML)."""
    return json.dumps(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
            "imageServiceEndpoint": f"unix://{layout.containerd_socket}",
            "podLogsDir": str(layout.root / "pod-logs"),
            "address": layout.node_ip,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz_port,
            "tlsCertFile": str(cert),
            "tlsPrivateKeyFile": str(key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(ca)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [layout.node_ip],
            "clusterDomain": "cluster.local",
            "resolvConf": str(layout.root / "resolv.conf"),
            "maxPods": 300,
            "serializeImagePulls": False,
            # Absolute floors, not shares: the node's disk is the machine's, often large and mostly
            # someone else's, and 2% of it free (kubelet's default) is gigabytes the node never needs.
            # Below a floor the kubelet taints the node and no runner Pod is placed (start() refuses
            # to begin with less than NODE_DISK_NEEDED free).
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "512Mi",
                "nodefs.inodesFree": "2%",
                "imagefs.available": "512Mi",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
        },
        indent=1,
    )


def kube_proxy_config(layout: Layout, *, kubeconfig: Path, healthz_port: int, metrics_port: int) -> str:
    """kube-proxy in iptables mode; it masquerades all Service traffic, since Pods share one bridge."""
    return json.dumps(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": layout.pod_cidr,
            "hostnameOverride": layout.node_name,
            "bindAddress": layout.node_ip,
            "healthzBindAddress": f"127.0.0.1:{healthz_port}",
            "metricsBindAddress": f"127.0.0.1:{metrics_port}",
            "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        },
        indent=1,
    )


def corefile(layout: Layout, *, kubeconfig: Path, health_port: int) -> str:
    """CoreDNS serving cluster.local from the API server, on the node's address (the Pods' resolver).

    The node reaches no internet: the registry act_runner's default labels pull from (STAND_IN_REGISTRY)
    resolves to the node's own address, where a test may serve its images (tests/node/registry.py)."""
    return f"""{STAND_IN_REGISTRY}:53 {{
    bind {layout.node_ip}
    errors
    hosts {{
        {layout.node_ip} {STAND_IN_REGISTRY}
    }}
}}
.:53 {{
    bind {layout.node_ip}
    errors
    health 127.0.0.1:{health_port}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} test
        pods insecure
    }}
}}
"""
