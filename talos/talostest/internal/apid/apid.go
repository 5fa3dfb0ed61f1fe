// Package apid is an emulated Talos node's apid: the Talos API over gRPC with mutual
// TLS (a server certificate signed by the cluster's OS CA, client certificates
// required and verified), the caller's roles read from its certificate and checked
// against machined's rule table, and apid's routing: a call with "node" metadata is
// forwarded to that node (in-process), with "nodes" fanned out to each, the replies
// stamped with the node in their metadata (failures become messages carrying the
// error); COSI calls with "nodes" are refused with InvalidArgument. A stopped or unknown
// node answers Unavailable with the dial error apid would report. machined registers
// its services here; apid knows the other nodes only as their apids.
package apid

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/authz"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
)

// methodRoles is machined's rule table (internal/app/machined/pkg/system/services/machined.go)
// for the methods the emulator serves. Methods not listed need os:admin (the fallback).
var methodRoles = map[string]role.Set{
	"/cluster.ClusterService/HealthCheck":           role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/ApplyConfiguration":    role.MakeSet(role.Admin, role.Reader), // reader only in maintenance, checked in the handler
	"/machine.MachineService/Bootstrap":             role.MakeSet(role.Admin),
	"/machine.MachineService/Containers":            role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Copy":                  role.MakeSet(role.Admin),
	"/machine.MachineService/Dmesg":                 role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/EtcdAlarmDisarm":       role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/EtcdAlarmList":         role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/EtcdDefragment":        role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/EtcdForfeitLeadership": role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdLeaveCluster":      role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdMemberList":        role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/EtcdRecover":           role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdRemoveMemberByID":  role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdSnapshot":          role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":            role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup),
	"/machine.MachineService/Events":                role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Kubeconfig":            role.MakeSet(role.Admin),
	"/machine.MachineService/Logs":                  role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Read":                  role.MakeSet(role.Admin),
	"/machine.MachineService/Reset":                 role.MakeSet(role.Admin),
	"/machine.MachineService/ServiceList":           role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/ServiceRestart":        role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ServiceStart":          role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ServiceStop":           role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Version":               role.MakeSet(role.Admin, role.Operator, role.Reader),

	// per-type authorization is handled by the resource access filter
	"/cosi.resource.State/Create":  role.MakeSet(role.Admin),
	"/cosi.resource.State/Destroy": role.MakeSet(role.Admin),
	"/cosi.resource.State/Get":     role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/List":    role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/Update":  role.MakeSet(role.Admin),
	"/cosi.resource.State/Watch":   role.MakeSet(role.Admin, role.Operator, role.Reader),
}

func authorize(ctx context.Context, method string) error {
	allowed, ok := methodRoles[method]
	if !ok {
		allowed = role.MakeSet(role.Admin)
	}

	if !allowed.IncludesAny(authz.Roles(ctx)) {
		return authz.ErrNotAuthorized
	}

	return nil
}

// handlers holds one node's service implementations, indexed by full method name, so
// that any node can dispatch a call to another one as apid does when it proxies.
type handlers struct {
	unary  map[string]func(ctx context.Context, dec func(any) error) (any, error)
	stream map[string]func(stream grpc.ServerStream) error
}

func (h *handlers) add(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		handler := m.Handler
		h.unary["/"+desc.ServiceName+"/"+m.MethodName] = func(ctx context.Context, dec func(any) error) (any, error) {
			return handler(impl, ctx, dec, nil)
		}
	}

	for _, st := range desc.Streams {
		handler := st.Handler
		h.stream["/"+desc.ServiceName+"/"+st.StreamName] = func(stream grpc.ServerStream) error {
			return handler(impl, stream)
		}
	}
}

// Server is one node's apid.
type Server struct {
	name     string
	addr     *ports.Reservation // holds the address while the API is stopped
	resolve  func(name string) *Server
	handlers handlers
	services []service

	mu  sync.Mutex
	tls *tls.Config
	srv *grpc.Server
	lis net.Listener
	up  atomic.Bool
}

type service struct {
	desc *grpc.ServiceDesc
	impl any
}

// New makes the apid of node name, serving on addr once Serve is called; resolve finds
// another node's apid by IP, IP:port or name (nil: no such node).
func New(name string, addr *ports.Reservation, resolve func(name string) *Server) *Server {
	return &Server{
		name: name, addr: addr, resolve: resolve,
		handlers: handlers{unary: map[string]func(context.Context, func(any) error) (any, error){}, stream: map[string]func(grpc.ServerStream) error{}},
	}
}

// Register adds a service the node serves (machined's), before Serve.
func (s *Server) Register(desc *grpc.ServiceDesc, impl any) {
	s.handlers.add(desc, impl)
	s.services = append(s.services, service{desc, impl})
}

// Addr is the API's address, IP:port.
func (s *Server) Addr() string { return s.addr.Addr() }

// ServerTLS is the node's apid TLS: a server certificate for its name and addresses
// signed by the OS CA, client certificates required and verified against the same CA.
func ServerTLS(osCA *sidero.PEMEncodedCertificateAndKey, name string, ips []net.IP) (*tls.Config, error) {
	ca, err := sidero.NewCertificateAuthorityFromCertificateAndKey(osCA)
	if err != nil {
		return nil, err
	}

	kp, err := sidero.NewKeyPair(ca,
		sidero.CommonName(name),
		sidero.DNSNames([]string{name}),
		sidero.IPAddresses(ips),
		sidero.NotAfter(time.Now().Add(24*time.Hour)),
		sidero.KeyUsage(x509.KeyUsageDigitalSignature),
		sidero.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(osCA.Crt) {
		return nil, errors.New("bad OS CA certificate")
	}

	return &tls.Config{
		Certificates: []tls.Certificate{*kp.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// Serve puts the API on the network with tlsConf.
func (s *Server) Serve(tlsConf *tls.Config) error {
	s.mu.Lock()
	s.tls = tlsConf
	s.mu.Unlock()

	return s.Start()
}

// Up tells whether the API is on the network.
func (s *Server) Up() bool { return s.up.Load() }

// Start serves the API again on the same address after Stop.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()

	if s.up.Load() {
		return nil
	}

	lis, err := s.addr.Listen()
	if err != nil {
		return err
	}

	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(s.tls)),
		grpc.UnaryInterceptor(s.unaryInterceptor),
		grpc.StreamInterceptor(s.streamInterceptor),
	)

	// the interceptors do the dispatching; these registrations make the methods known to grpc
	for _, svc := range s.services {
		srv.RegisterService(svc.desc, svc.impl)
	}

	s.srv, s.lis = srv, lis
	s.up.Store(true)

	go srv.Serve(lis) //nolint:errcheck

	return nil
}

// Stop takes the API off the network: connections are refused, and other nodes answer
// Unavailable when asked to forward to it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.up.Store(false)

	if s.srv != nil {
		s.srv.Stop()
		// Serve may not have taken the listener yet (then it closes it later):
		// close it here, so that the port is free when Stop returns
		s.lis.Close() //nolint:errcheck
		s.srv, s.lis = nil, nil
	}
}

// StopGracefully is apid stopping: the calls in flight finish (a reply already on its
// way arrives), for a second at most, then every connection goes.
func (s *Server) StopGracefully() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()

	if srv != nil {
		done := make(chan struct{})

		go func() {
			srv.GracefulStop()
			close(done)
		}()

		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}

	s.Stop()
}

// Close stops the API and gives its address up.
func (s *Server) Close() {
	s.Stop()
	s.addr.Close() //nolint:errcheck
}

// proxy modes, as apid's director chooses them.
type routeMode int

const (
	routeLocal routeMode = iota
	routeOne
	routeMany
)

func route(ctx context.Context, method string) (routeMode, []string, error) {
	md, _ := metadata.FromIncomingContext(ctx)

	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return routeOne, nil, status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	switch {
	case okNodes:
		if !strings.HasPrefix(method, "/machine.MachineService/") && !strings.HasPrefix(method, "/cluster.ClusterService/") {
			return routeOne, nil, status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", method)
		}

		return routeMany, nodes, nil
	case okNode:
		return routeOne, node, nil
	default:
		return routeLocal, nil, nil
	}
}

// target finds the node a request is forwarded to, or the error apid would get dialing it.
func (s *Server) target(name string) (*Server, error) {
	t := s.resolve(name)
	if t == nil || !t.Up() {
		addr := name
		if t != nil {
			addr = t.Addr()
		} else if !strings.Contains(addr, ":") {
			addr = fmt.Sprintf("%s:%d", name, 50000)
		}

		return nil, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"", addr)
	}

	return t, nil
}

// Call makes a unary call on a node as apid forwards it (target unreachable: apid's
// dial error), with the roles ctx carries: what machined's own client does.
func (s *Server) Call(ctx context.Context, node, method string, req, resp proto.Message) error {
	t, err := s.target(node)
	if err != nil {
		return err
	}

	out, err := t.invokeUnary(ctx, method, func(into any) error {
		proto.Merge(into.(proto.Message), req)

		return nil
	})
	if err != nil {
		return err
	}

	proto.Merge(resp, out.(proto.Message))

	return nil
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	ctx = authz.WithRoles(ctx, authz.PeerRoles(ctx))

	mode, targets, err := route(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}

	dec := func(into any) error {
		proto.Merge(into.(proto.Message), req.(proto.Message))

		return nil
	}

	switch mode {
	case routeLocal:
		return s.invokeUnary(ctx, info.FullMethod, dec)
	case routeOne:
		t, err := s.target(targets[0])
		if err != nil {
			return nil, err
		}

		return t.invokeUnary(ctx, info.FullMethod, dec)
	default:
		return s.invokeUnaryMany(ctx, info.FullMethod, targets, dec)
	}
}

func (s *Server) invokeUnary(ctx context.Context, method string, dec func(any) error) (any, error) {
	h, ok := s.handlers.unary[method]
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}

	if err := authorize(ctx, method); err != nil {
		return nil, err
	}

	return h(ctx, dec)
}

// invokeUnaryMany does apid's one-to-many proxying: every reply message gets the target
// in its metadata, and a failing target becomes a message carrying the error.
func (s *Server) invokeUnaryMany(ctx context.Context, method string, targets []string, dec func(any) error) (any, error) {
	var merged protoreflect.Message

	var failures []string // targets whose errors must be appended once the reply type is known

	var failErrs []error

	for _, name := range targets {
		var (
			resp any
			err  error
		)

		t, terr := s.target(name)
		if terr != nil {
			err = terr
		} else {
			resp, err = t.invokeUnary(ctx, method, dec)
		}

		if err != nil {
			failures = append(failures, name)
			failErrs = append(failErrs, err)

			continue
		}

		m := resp.(proto.Message).ProtoReflect()
		setListMetadata(m, &common.Metadata{Hostname: name})

		if merged == nil {
			merged = m
		} else {
			appendList(merged, m)
		}
	}

	if merged == nil {
		// no target answered: the reply type is still needed to carry the errors
		resp, err := emptyReply(method)
		if err != nil {
			return nil, failErrs[0]
		}

		merged = resp
	}

	for i, name := range failures {
		appendError(merged, &common.Metadata{Hostname: name, Error: failErrs[i].Error(), Status: status.Convert(failErrs[i]).Proto()})
	}

	return merged.Interface(), nil
}

// emptyReply builds an empty reply message for a machine service method.
func emptyReply(method string) (protoreflect.Message, error) {
	name := strings.TrimPrefix(method, "/machine.MachineService/")

	sd := machine.File_machine_machine_proto.Services().ByName("MachineService")
	if sd == nil {
		return nil, fmt.Errorf("no machine service descriptor")
	}

	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, fmt.Errorf("no method %s", name)
	}

	mt, err := protoRegistryFind(md.Output().FullName())
	if err != nil {
		return nil, err
	}

	return mt.New(), nil
}

func messagesField(m protoreflect.Message) protoreflect.FieldDescriptor {
	fd := m.Descriptor().Fields().ByNumber(1)
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return nil
	}

	return fd
}

func setMetadata(m protoreflect.Message, md *common.Metadata) {
	fd := m.Descriptor().Fields().ByNumber(1)
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "common.Metadata" {
		return
	}

	m.Set(fd, protoreflect.ValueOfMessage(proto.Clone(md).ProtoReflect()))
}

func setListMetadata(m protoreflect.Message, md *common.Metadata) {
	fd := messagesField(m)
	if fd == nil {
		return
	}

	list := m.Get(fd).List()
	for i := range list.Len() {
		setMetadata(list.Get(i).Message(), md)
	}
}

func appendList(dst, src protoreflect.Message) {
	fd := messagesField(dst)
	if fd == nil {
		return
	}

	from := src.Get(fd).List()
	to := dst.Mutable(fd).List()

	for i := range from.Len() {
		to.Append(from.Get(i))
	}
}

func appendError(dst protoreflect.Message, md *common.Metadata) {
	fd := messagesField(dst)
	if fd == nil {
		return
	}

	list := dst.Mutable(fd).List()
	el := list.NewElement()
	setMetadata(el.Message(), md)
	list.Append(el)
}

// serverStream carries the roles in its context and can stamp outgoing messages.
type serverStream struct {
	grpc.ServerStream

	ctx  context.Context //nolint:containedctx
	mu   *sync.Mutex
	meta *common.Metadata
}

func (s *serverStream) Context() context.Context { return s.ctx }

func (s *serverStream) SendMsg(m any) error {
	if s.meta != nil {
		if pm, ok := m.(proto.Message); ok {
			setMetadata(pm.ProtoReflect(), s.meta)
		}
	}

	if s.mu != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}

	return s.ServerStream.SendMsg(m)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
	ctx := authz.WithRoles(ss.Context(), authz.PeerRoles(ss.Context()))

	mode, targets, err := route(ctx, info.FullMethod)
	if err != nil {
		return err
	}

	switch mode {
	case routeLocal:
		return s.invokeStream(&serverStream{ServerStream: ss, ctx: ctx}, info.FullMethod)
	case routeOne:
		t, err := s.target(targets[0])
		if err != nil {
			return err
		}

		return t.invokeStream(&serverStream{ServerStream: ss, ctx: ctx}, info.FullMethod)
	default:
		if info.IsClientStream {
			return s.invokeClientStreamMany(ctx, ss, info.FullMethod, targets)
		}

		return s.invokeStreamMany(ctx, ss, info.FullMethod, targets)
	}
}

// invokeClientStreamMany forwards a client-streaming call (EtcdRecover) with "nodes"
// metadata: to one node, whose reply gets the node in its messages' metadata, as
// apid's one-to-many proxying does. Several nodes would each need every message of
// the stream; the emulator refuses that rather than send them to one.
func (s *Server) invokeClientStreamMany(ctx context.Context, ss grpc.ServerStream, method string, targets []string) error {
	if len(targets) != 1 {
		return status.Errorf(codes.Unimplemented, "%s to %d nodes at once is not emulated (one node)", method, len(targets))
	}

	t, err := s.target(targets[0])
	if err != nil {
		return err
	}

	return t.invokeStream(&listStampStream{ServerStream: ss, ctx: ctx, meta: &common.Metadata{Hostname: targets[0]}}, method)
}

// listStampStream stamps the node into every message of a reply's list.
type listStampStream struct {
	grpc.ServerStream

	ctx  context.Context //nolint:containedctx
	meta *common.Metadata
}

func (s *listStampStream) Context() context.Context { return s.ctx }

func (s *listStampStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		setListMetadata(pm.ProtoReflect(), s.meta)
	}

	return s.ServerStream.SendMsg(m)
}

func (s *Server) invokeStream(ss grpc.ServerStream, method string) error {
	h, ok := s.handlers.stream[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}

	if err := authorize(ss.Context(), method); err != nil {
		return err
	}

	return h(ss)
}

// invokeStreamMany fans a server-streaming call out to several nodes. The request
// message is read once and replayed to each target.
func (s *Server) invokeStreamMany(ctx context.Context, ss grpc.ServerStream, method string, targets []string) error {
	var mu sync.Mutex

	req, err := readStreamRequest(ss, method)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup

	for _, name := range targets {
		wg.Add(1)

		go func() {
			defer wg.Done()

			out := &serverStream{ServerStream: &replayStream{ServerStream: ss, req: req}, ctx: ctx, mu: &mu, meta: &common.Metadata{Hostname: name}}

			t, err := s.target(name)
			if err == nil {
				err = t.invokeStream(out, method)
			}

			if err != nil {
				out.meta = &common.Metadata{Hostname: name, Error: err.Error(), Status: status.Convert(err).Proto()}
				out.SendMsg(&common.Data{}) //nolint:errcheck
			}
		}()
	}

	wg.Wait()

	return nil
}

// replayStream hands a request read earlier to a handler.
type replayStream struct {
	grpc.ServerStream

	req proto.Message
}

func (r *replayStream) RecvMsg(m any) error {
	proto.Merge(m.(proto.Message), r.req)

	return nil
}

func readStreamRequest(ss grpc.ServerStream, method string) (proto.Message, error) {
	md := methodDescriptor(method)
	if md == nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}

	mt, err := protoRegistryFind(md.Input().FullName())
	if err != nil {
		return nil, err
	}

	req := mt.New().Interface()
	if err := ss.RecvMsg(req); err != nil {
		return nil, err
	}

	return req, nil
}

func protoRegistryFind(name protoreflect.FullName) (protoreflect.MessageType, error) {
	return protoregistry.GlobalTypes.FindMessageByName(name)
}

// methodDescriptor finds "/package.Service/Method" among the registered protobuf files.
func methodDescriptor(method string) protoreflect.MethodDescriptor {
	service, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil
	}

	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil
	}

	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil
	}

	return sd.Methods().ByName(protoreflect.Name(name))
}
