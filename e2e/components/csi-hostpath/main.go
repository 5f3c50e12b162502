// csi-hostpath is the CSI node plugin of volguard's real-node end-to-end test: a
// host-path driver that publishes the way csi-driver-host-path and most real drivers do
// (k8s.io/mount-utils: a bind, then a separate bind,remount when there are mount
// options; an existing mount point at the target is taken as already published), and
// registers itself with kubelet through the plugin-registration socket as
// node-driver-registrar does.
//
// Why not the upstream driver: the Go module proxy this project can reach serves
// neither github.com/kubernetes-csi/csi-driver-host-path nor node-driver-registrar, so
// neither can be built here. Everything else it talks to is upstream: kubelet calls it
// over the real CSI API, and the mounts it makes are real mounts in the node.
//
// Like drivers without SINGLE_NODE_MULTI_WRITER (the hole volguard covers), it accepts a
// second publish of a volume into another pod; -single-node-multi-writer advertises the
// capability and then refuses a second SINGLE_NODE_SINGLE_WRITER publish, as the
// upstream driver does.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	mount "k8s.io/mount-utils"
)

var (
	driverName       = flag.String("drivername", "hostpath.e2e.volguard.dev", "CSI driver name")
	endpoint         = flag.String("endpoint", "/csi/csi.sock", "CSI socket, as this container sees it")
	kubeletEndpoint  = flag.String("kubelet-endpoint", "/var/lib/kubelet/plugins/hostpath.e2e.volguard.dev/csi.sock", "the same socket as kubelet on the node sees it")
	registrationSock = flag.String("registration-socket", "/registration/hostpath.e2e.volguard.dev-reg.sock", "kubelet plugin-registration socket to serve")
	nodeID           = flag.String("nodeid", "", "node ID (the node's name)")
	stateDir         = flag.String("statedir", "/csi-data-dir", "where each volume's data directory lives")
	multiWriter      = flag.Bool("single-node-multi-writer", false, "advertise SINGLE_NODE_MULTI_WRITER and refuse a second single-writer publish")
	onlyRecorded     = flag.Bool("unpublish-only-recorded", false, "as csi-driver-host-path: a publish that finds a mount point at its target is not recorded, and NodeUnpublishVolume unmounts only recorded targets")
	version          = "v0.1.0"
)

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	mounter mount.Interface
	mu      sync.Mutex
	// published targets per volume, to refuse a second SINGLE_NODE_SINGLE_WRITER one.
	published map[string]map[string]bool
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: *driverName, VendorVersion: version}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func nodeCap(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	caps := []*csi.NodeServiceCapability{nodeCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}
	if *multiWriter {
		caps = append(caps, nodeCap(csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: *nodeID, MaxVolumesPerNode: 100}, nil
}

func volumeDir(id string) (string, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return "", status.Errorf(codes.InvalidArgument, "volume id %q is not a plain name", id)
	}
	return filepath.Join(*stateDir, id), nil
}

// NodeStageVolume binds the volume's data directory onto the staging path (kubelet's
// globalmount), as a block-backed driver mounts its device there.
func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	dir, err := volumeDir(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	staging := req.GetStagingTargetPath()
	if staging == "" || req.GetVolumeCapability().GetMount() == nil {
		return nil, status.Error(codes.InvalidArgument, "a staging path and a mount capability are required")
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	notMnt, err := d.mounter.IsLikelyNotMountPoint(staging)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if notMnt {
		if err := d.mounter.Mount(dir, staging, "", []string{"bind"}); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := mount.CleanupMountPoint(req.GetStagingTargetPath(), d.mounter, true); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume binds the staged volume onto the pod's target, with mount-utils'
// two steps (bind, then bind,remount) when there are mount options. A target that is
// already a mount point counts as published, as in csi-driver-host-path (which, with
// -unpublish-only-recorded, then does not record it: its unpublish will not unmount it).
func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	capability := req.GetVolumeCapability()
	if id == "" || target == "" || staging == "" || capability.GetMount() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume id, target, staging path and a mount capability are required")
	}
	mode := capability.GetAccessMode().GetMode()
	d.mu.Lock()
	defer d.mu.Unlock()
	if *multiWriter && mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		for other := range d.published[id] {
			if other != target {
				return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published at %s with single-writer access", id, other)
			}
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	notMnt, err := d.mounter.IsLikelyNotMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if !notMnt && *onlyRecorded {
		// csi-driver-host-path: "already published", and not recorded as published by us.
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if notMnt {
		options := []string{"bind"}
		if req.GetReadonly() {
			options = append(options, "ro")
		}
		options = append(options, capability.GetMount().GetMountFlags()...)
		if err := d.mounter.Mount(staging, target, "", options); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if d.published[id] == nil {
		d.published[id] = map[string]bool{}
	}
	d.published[id][target] = true
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if *onlyRecorded {
		d.mu.Lock()
		recorded := d.published[req.GetVolumeId()][req.GetTargetPath()]
		d.mu.Unlock()
		if !recorded {
			// csi-driver-host-path: nothing it published there, nothing to undo.
			return &csi.NodeUnpublishVolumeResponse{}, nil
		}
	}
	if err := mount.CleanupMountPoint(req.GetTargetPath(), d.mounter, true); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.mu.Lock()
	delete(d.published[req.GetVolumeId()], req.GetTargetPath())
	d.mu.Unlock()
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// registrar answers kubelet's plugin watcher, as node-driver-registrar does.
type registrar struct {
	registration.UnimplementedRegistrationServer
}

func (*registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              *driverName,
		Endpoint:          *kubeletEndpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (*registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("kubelet refused the registration: %s", s.Error)
	} else {
		log.Printf("registered with kubelet")
	}
	return &registration.RegistrationStatusResponse{}, nil
}

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return net.Listen("unix", path)
}

func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else if !strings.Contains(info.FullMethod, "Identity") && !strings.HasSuffix(info.FullMethod, "NodeGetCapabilities") {
		log.Printf("%s: ok", info.FullMethod)
	}
	return resp, err
}

func main() {
	flag.Parse()
	if *nodeID == "" {
		log.Fatal("-nodeid is required")
	}
	d := &driver{mounter: mount.New(""), published: map[string]map[string]bool{}}
	csiListener, err := listen(*endpoint)
	if err != nil {
		log.Fatalf("listening on %s: %v", *endpoint, err)
	}
	csiServer := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(csiServer, d)
	csi.RegisterNodeServer(csiServer, d)
	go func() { log.Fatal(csiServer.Serve(csiListener)) }()

	regListener, err := listen(*registrationSock)
	if err != nil {
		log.Fatalf("listening on %s: %v", *registrationSock, err)
	}
	regServer := grpc.NewServer()
	registration.RegisterRegistrationServer(regServer, &registrar{})
	go func() { log.Fatal(regServer.Serve(regListener)) }()
	fmt.Printf("%s %s serving %s (kubelet: %s), registration %s\n", *driverName, version, *endpoint, *kubeletEndpoint, *registrationSock)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	regServer.Stop()
	csiServer.Stop()
	os.Remove(*registrationSock)
}
