// Package ports reserves TCP addresses on loopback for the emulated nodes' servers.
package ports

import (
	"net"
	"strconv"
)

// Reservation holds a TCP address for as long as its owner needs it, so
// that a server can stop listening and listen again (a node taken off the
// network, a kube-apiserver restarted, an etcd member, a webhook backend
// going down and up) without another process taking the port in between.
//
// On Unix it is a socket bound to the address with SO_REUSEPORT and never
// listening: connections to the address are refused while nothing listens,
// and listeners that also set SO_REUSEPORT may bind it (Listen here,
// kube-apiserver --permit-port-sharing, etcd's SocketOpts.ReusePort).
// Elsewhere the port is only picked, not held.
type Reservation struct {
	ip   string
	port int
	hold closer
}

type closer interface{ Close() error }

// Reserve reserves ip:port; port 0 picks a free port.
func Reserve(ip string, port int) (*Reservation, error) {
	hold, port, err := reserve(ip, port)
	if err != nil {
		return nil, err
	}

	return &Reservation{ip: ip, port: port, hold: hold}, nil
}

// Port is the reserved port.
func (r *Reservation) Port() int { return r.port }

// Addr is the reserved address, IP:port.
func (r *Reservation) Addr() string { return net.JoinHostPort(r.ip, strconv.Itoa(r.port)) }

// Listen listens on the reserved address (sharing the port with the reservation).
func (r *Reservation) Listen() (net.Listener, error) { return listenShared(r.Addr()) }

// Close gives the address up.
func (r *Reservation) Close() error {
	if r == nil || r.hold == nil {
		return nil
	}

	return r.hold.Close()
}
