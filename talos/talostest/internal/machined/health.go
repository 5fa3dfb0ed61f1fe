package machined

// ClusterService.HealthCheck (talosctl health, --server by default), as machined runs it
// (sources: siderolabs/talos v1.13.8, internal/app/machined/internal/server/v1alpha1/
// v1alpha1_cluster.go, pkg/cluster/check): control planes only; the nodes are those of
// the request, else the discovery Members; "discovered nodes: [...]" first, then each
// check in machined's order, polled until it passes or the request's wait timeout ends
// (the stream then fails with the deadline), each reported as "waiting for CHECK: ..."
// and again with its last error or OK when it changes. The checks call the nodes' own
// APIs with the caller's roles, as machined's local client does, so they see what a
// client would see: etcd's service health and real member lists, apid on every node,
// each node's boot stage (MachineStatus), kubelet's service health, and Kubernetes
// itself (kube-apiserver at the cluster endpoint, with an admin certificate: its Node
// objects). What the emulator cannot check (memory and disk sizes, diagnostics, and the
// Kubernetes checks after the node list: the emulator registers no Node) is reported as
// "not checked by the emulator" and never as passing; a health check that reaches the
// end with such checks fails with FailedPrecondition, naming them.

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// clusterService implements the ClusterService.
type clusterService struct {
	clusterapi.UnimplementedClusterServiceServer

	m *Machined
}

// healthNodes is the cluster as the health check sees it: internal IPs by type.
type healthNodes struct {
	controlPlanes, workers []string
}

func (h healthNodes) all() []string { return slices.Concat(h.controlPlanes, h.workers) }

// healthCheck is one of machined's checks: its description, how often it is polled, and
// its assertion; nil assertion: the emulator cannot do it.
type healthCheck struct {
	name     string
	interval time.Duration
	assert   func(ctx context.Context) error
}

// notChecked is the outcome of a check the emulator cannot do.
const notChecked = "not checked by the emulator"

// HealthCheck implements clusterapi.ClusterServiceServer.
func (s *clusterService) HealthCheck(in *clusterapi.HealthCheckRequest, srv clusterapi.ClusterService_HealthCheckServer) error {
	m := s.m

	if err := m.checkControlPlane("cluster health check"); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(srv.Context(), in.GetWaitTimeout().AsDuration())
	defer cancel()

	nodes, err := m.healthNodes(ctx, in.GetClusterInfo())
	if err != nil {
		return err
	}

	if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("discovered nodes: %q", nodes.all())}); err != nil {
		return err
	}

	var skipped []string

	for _, c := range m.healthChecks(nodes, in.GetClusterInfo().GetForceEndpoint()) {
		if err := ctx.Err(); err != nil {
			return err
		}

		if c.assert == nil {
			skipped = append(skipped, c.name)

			if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("waiting for %s: %s", c.name, notChecked)}); err != nil {
				return err
			}

			continue
		}

		if err := pollCheck(ctx, c, func(msg string) error { return srv.Send(&clusterapi.HealthCheckProgress{Message: msg}) }); err != nil {
			return err
		}
	}

	if len(skipped) > 0 {
		return status.Errorf(codes.FailedPrecondition, "%d checks not done by the emulator: %s", len(skipped), strings.Join(skipped, ", "))
	}

	return nil
}

// pollCheck is conditions.PollingCondition under check.Wait with machined's reporter:
// "..." before the first answer, then each new outcome once.
func pollCheck(ctx context.Context, c healthCheck, send func(string) error) error {
	last := ""
	report := func(outcome string) error {
		line := strings.TrimSpace(fmt.Sprintf("waiting for %s: %s", c.name, outcome))
		if line == last {
			return nil
		}

		last = line

		return send(line)
	}

	if err := report("..."); err != nil {
		return err
	}

	t := time.NewTicker(c.interval)
	defer t.Stop()

	for {
		runCtx, runCancel := context.WithTimeout(ctx, c.interval)
		err := c.assert(runCtx)

		runCancel()

		outcome := "OK"
		if err != nil {
			outcome = err.Error()
		}

		if rerr := report(outcome); rerr != nil {
			return rerr
		}

		if err == nil {
			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// healthNodes is machined's buildClusterInfo: the request's nodes, else discovery's.
func (m *Machined) healthNodes(ctx context.Context, info *clusterapi.ClusterInfo) (healthNodes, error) {
	if len(info.GetControlPlaneNodes()) > 0 || len(info.GetWorkerNodes()) > 0 {
		for _, ip := range slices.Concat(info.GetControlPlaneNodes(), info.GetWorkerNodes()) {
			if _, err := netip.ParseAddr(ip); err != nil {
				return healthNodes{}, fmt.Errorf("failed to parse IP %q: %w", ip, err)
			}
		}

		return healthNodes{controlPlanes: info.GetControlPlaneNodes(), workers: info.GetWorkerNodes()}, nil
	}

	members, err := safe.StateListAll[*cluster.Member](ctx, m.st)
	if err != nil {
		return healthNodes{}, err
	}

	var out healthNodes

	for m := range members.All() {
		if len(m.TypedSpec().Addresses) == 0 {
			continue
		}

		ip := m.TypedSpec().Addresses[0].String()

		if m.TypedSpec().MachineType == machinetype.TypeWorker {
			out.workers = append(out.workers, ip)
		} else {
			out.controlPlanes = append(out.controlPlanes, ip)
		}
	}

	return out, nil
}

// call makes a unary machine-service call on a node through apid, with the caller's roles.
func (m *Machined) call(ctx context.Context, node, method string, req, resp proto.Message) error {
	return m.api.Call(ctx, node, "/machine.MachineService/"+method, req, resp)
}

// joinNodeErrors is how the machinery client reports the failures of several nodes.
func joinNodeErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}

	lines := make([]string, 0, len(errs))
	for _, e := range errs {
		lines = append(lines, "\t* "+e.Error())
	}

	return fmt.Errorf("%d error(s) occurred:\n%s\n\n", len(errs), strings.Join(lines, "\n"))
}

// serviceHealth is check.ServiceHealthAssertion on the given nodes.
func (m *Machined) serviceHealth(ctx context.Context, nodes []string, service string) error {
	var errs []error

	for _, ip := range slices.Sorted(slices.Values(nodes)) {
		var resp machine.ServiceListResponse
		if err := m.call(ctx, ip, "ServiceList", &emptypb.Empty{}, &resp); err != nil {
			return fmt.Errorf("%s: %w", ip, err)
		}

		for _, m := range resp.GetMessages() {
			for _, svc := range m.GetServices() {
				if svc.GetId() != service {
					continue
				}

				evs := svc.GetEvents().GetEvents()

				switch {
				case len(evs) == 0:
					errs = append(errs, fmt.Errorf("%s: no events recorded yet for service %q", ip, service))
				case evs[len(evs)-1].GetState() != "Running":
					last := evs[len(evs)-1]
					errs = append(errs, fmt.Errorf("%s: service %q not in expected state %q: current state [%s] %s", ip, service, "Running", last.GetState(), last.GetMsg()))
				case !svc.GetHealth().GetHealthy():
					errs = append(errs, fmt.Errorf("%s: service is not healthy: %s", ip, service))
				}
			}
		}
	}

	return joinNodeErrors(errs)
}

// etcdConsistent is check.EtcdConsistentAssertion: every control plane lists the same members.
func (m *Machined) etcdConsistent(ctx context.Context, nodes []string) error {
	type member struct {
		hostname string
		id       uint64
		learner  bool
	}

	var known map[member]bool

	for i, ip := range slices.Sorted(slices.Values(nodes)) {
		var resp machine.EtcdMemberListResponse
		if err := m.call(ctx, ip, "EtcdMemberList", &machine.EtcdMemberListRequest{}, &resp); err != nil {
			return err
		}

		var members []*machine.EtcdMember
		for _, m := range resp.GetMessages() {
			members = append(members, m.GetMembers()...)
		}

		if i == 0 {
			known = map[member]bool{}
			for _, m := range members {
				known[member{m.GetHostname(), m.GetId(), m.GetIsLearner()}] = true
			}

			continue
		}

		if len(members) != len(known) {
			var expected, actual []string
			for k := range known {
				expected = append(expected, k.hostname)
			}

			for _, m := range members {
				actual = append(actual, m.GetHostname())
			}

			return fmt.Errorf("%s: expected to have %v members, got %v", ip, expected, actual)
		}

		for _, m := range members {
			if !known[member{m.GetHostname(), m.GetId(), m.GetIsLearner()}] {
				return fmt.Errorf("%s: found unexpected etcd member %s", ip, m.GetHostname())
			}
		}
	}

	return nil
}

// etcdOnControlPlanes is check.EtcdControlPlaneNodesAssertion: every member's peer
// address is a control plane's.
func (m *Machined) etcdOnControlPlanes(ctx context.Context, nodes []string) error {
	var resp machine.EtcdMemberListResponse
	if err := m.call(ctx, m.host.IP, "EtcdMemberList", &machine.EtcdMemberListRequest{}, &resp); err != nil {
		return err
	}

	var memberIPs []string

	for _, m := range resp.GetMessages() {
		for _, member := range m.GetMembers() {
			for _, peer := range member.GetPeerUrls() {
				u, err := url.Parse(peer)
				if err != nil {
					return err
				}

				memberIPs = append(memberIPs, u.Hostname())
			}
		}
	}

	for _, ip := range memberIPs {
		if !slices.Contains(nodes, ip) {
			return fmt.Errorf("etcd member ips %q are not subset of control plane node ips %q", memberIPs, nodes)
		}
	}

	return nil
}

// apidReady is check.ApidReadyAssertion: Version answers on every node.
func (m *Machined) apidReady(ctx context.Context, nodes []string) error {
	var errs []error

	for _, ip := range nodes {
		var resp machine.VersionResponse
		if err := m.call(ctx, ip, "Version", &emptypb.Empty{}, &resp); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ip, err))
		}
	}

	return joinNodeErrors(errs)
}

// allBooted is check.AllNodesBootedAssertion: every node's MachineStatus stage is running.
func (m *Machined) allBooted(ctx context.Context, nodes []string) error {
	stages := map[string][]string{}

	for _, ip := range nodes {
		ms, err := m.machineStatus(ctx, ip)
		if err != nil {
			return err
		}

		stages[ms.TypedSpec().Stage.String()] = append(stages[ms.TypedSpec().Stage.String()], ip)
	}

	delete(stages, runtime.MachineStageRunning.String())

	if len(stages) == 0 {
		return nil
	}

	var parts []string
	for stage, ips := range stages {
		parts = append(parts, fmt.Sprintf("%s: %q", stage, ips))
	}

	slices.Sort(parts)

	return fmt.Errorf("some nodes are not running: %s", strings.Join(parts, ", "))
}

// k8sNodesReported is check.K8sAllNodesReportedAssertion: kube-apiserver's Node objects
// are the cluster's nodes, asked of kube-apiserver at the cluster endpoint (or the
// request's) with an admin certificate, as machined's client-go does.
func (m *Machined) k8sNodesReported(ctx context.Context, nodes []string, endpoint string) error {
	kp, caPEM, err := m.adminCredentials()
	if err != nil {
		return err
	}

	cert, err := tls.X509KeyPair(kp.CrtPEM, kp.KeyPEM)
	if err != nil {
		return err
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	if endpoint == "" {
		endpoint = m.currentConfig().prov.Cluster().Endpoint().String()
	} else if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/api/v1/nodes", nil)
	if err != nil {
		return err
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()

	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck

	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("listing nodes: %s", resp.Status)
	}

	var list corev1.NodeList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return err
	}

	actual := map[string]bool{}

	for _, node := range list.Items {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				actual[a.Address] = true
			}
		}
	}

	for _, ip := range nodes {
		if !actual[ip] {
			return fmt.Errorf("can't find expected node with IPs [%q]", ip)
		}

		delete(actual, ip)
	}

	if len(actual) > 0 {
		var extra []string
		for ip := range actual {
			extra = append(extra, fmt.Sprintf("%q", ip))
		}

		slices.Sort(extra)

		return fmt.Errorf("unexpected nodes with IPs [%s]", strings.Join(extra, " "))
	}

	return nil
}

// healthChecks are machined's DefaultClusterChecks, in order.
func (m *Machined) healthChecks(nodes healthNodes, endpoint string) []healthCheck {
	const every = 5 * time.Second

	return []healthCheck{
		{"etcd to be healthy", every, func(ctx context.Context) error { return m.serviceHealth(ctx, nodes.controlPlanes, "etcd") }},
		{"etcd members to be consistent across nodes", every, func(ctx context.Context) error { return m.etcdConsistent(ctx, nodes.controlPlanes) }},
		{"etcd members to be control plane nodes", every, func(ctx context.Context) error { return m.etcdOnControlPlanes(ctx, nodes.controlPlanes) }},
		{"apid to be ready", every, func(ctx context.Context) error { return m.apidReady(ctx, nodes.all()) }},
		{"all nodes memory sizes", every, nil},
		{"all nodes disk sizes", every, nil},
		{"no diagnostics", every, nil},
		{"kubelet to be healthy", every, func(ctx context.Context) error { return m.serviceHealth(ctx, nodes.controlPlanes, "kubelet") }},
		{"all nodes to finish boot sequence", every, func(ctx context.Context) error { return m.allBooted(ctx, nodes.all()) }},
		{"all k8s nodes to report", 30 * time.Second, func(ctx context.Context) error { return m.k8sNodesReported(ctx, nodes.all(), endpoint) }},
		{"all control plane static pods to be running", every, nil},
		{"all control plane components to be ready", every, nil},
		{"all k8s nodes to report ready", every, nil},
		{"kube-proxy to report ready", every, nil},
		{"coredns to report ready", every, nil},
		{"all k8s nodes to report schedulable", every, nil},
	}
}

// machineStatus reads a node's MachineStatus through its COSI API, as machined's
// client does.
func (m *Machined) machineStatus(ctx context.Context, node string) (*runtime.MachineStatus, error) {
	md := runtime.NewMachineStatus().Metadata()

	var resp cosiv1alpha1.GetResponse
	if err := m.api.Call(ctx, node, "/cosi.resource.State/Get", &cosiv1alpha1.GetRequest{Namespace: md.Namespace(), Type: md.Type(), Id: md.ID()}, &resp); err != nil {
		return nil, err
	}

	pr, err := protobuf.Unmarshal(resp.GetResource())
	if err != nil {
		return nil, err
	}

	r, err := protobuf.UnmarshalResource(pr)
	if err != nil {
		return nil, err
	}

	ms, ok := r.(*runtime.MachineStatus)
	if !ok {
		return nil, fmt.Errorf("unexpected resource %T", r)
	}

	return ms, nil
}
