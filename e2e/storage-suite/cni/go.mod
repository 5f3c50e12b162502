// The CNI plugins of the storage suite's pod network (bridge with host-local addresses):
// the suite's pods do not use the host's network, and containerd needs an address for
// each. The same containernetworking/plugins release as the node's loopback plugin
// (e2e/components/go.mod). A module of its own so that it moves none of e2e.test's
// modules (e2e/storage-suite/go.mod).
module volguard.dev/e2e/storage-suite/cni

go 1.26

tool (
	github.com/containernetworking/plugins/plugins/ipam/host-local
	github.com/containernetworking/plugins/plugins/main/bridge
)

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/containernetworking/cni v1.3.0 // indirect
	github.com/containernetworking/plugins v1.9.0 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/networkplumbing/go-nft v0.4.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.6.2 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.35.0 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
)
