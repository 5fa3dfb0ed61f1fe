// Package authz carries a Talos API caller's roles from apid, which reads them off the
// client certificate, to machined, which checks them (pkg/grpc/middleware/authz).
package authz

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

// ErrNotAuthorized is what Talos' authz middleware answers.
var ErrNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

type rolesKey struct{}

// WithRoles returns ctx carrying the caller's roles.
func WithRoles(ctx context.Context, roles role.Set) context.Context {
	return context.WithValue(ctx, rolesKey{}, roles)
}

// Roles are the caller's roles (none when ctx carries none).
func Roles(ctx context.Context) role.Set {
	if r, ok := ctx.Value(rolesKey{}).(role.Set); ok {
		return r
	}

	return role.Zero
}

// PeerRoles reads the roles from the verified client certificate's Organization, as apid does.
func PeerRoles(ctx context.Context) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Zero
	}

	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.Zero
	}

	roles, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	return roles
}
