package talostest

import "github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"

// PortReservation holds a TCP address for as long as its owner needs it, so that a
// server can stop listening and listen again without another process taking the port
// in between (see ports.Reservation).
type PortReservation = ports.Reservation

// ReservePort reserves ip:port; port 0 picks a free port.
func ReservePort(ip string, port int) (*PortReservation, error) { return ports.Reserve(ip, port) }
