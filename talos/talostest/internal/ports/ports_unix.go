//go:build unix

package ports

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// reserve binds a socket with SO_REUSEPORT to ip:port without listening on
// it. No SO_REUSEADDR: with it, any listener could bind next to a socket
// that does not listen.
func reserve(ip string, port int) (closer, int, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, 0, fmt.Errorf("reserve %s: not an IP address", ip)
	}

	var (
		family = syscall.AF_INET
		sa     syscall.Sockaddr
	)

	if v4 := addr.To4(); v4 != nil {
		sa4 := &syscall.SockaddrInet4{Port: port}
		copy(sa4.Addr[:], v4)
		sa = sa4
	} else {
		family = syscall.AF_INET6
		sa6 := &syscall.SockaddrInet6{Port: port}
		copy(sa6.Addr[:], addr.To16())
		sa = sa6
	}

	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, 0, os.NewSyscallError("socket", err)
	}

	syscall.CloseOnExec(fd)

	if err = os.NewSyscallError("setsockopt", syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)); err == nil {
		err = os.NewSyscallError("bind", syscall.Bind(fd, sa))
	}

	if err != nil {
		syscall.Close(fd) //nolint:errcheck

		return nil, 0, fmt.Errorf("reserve %s: %w", net.JoinHostPort(ip, fmt.Sprint(port)), err)
	}

	bound, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd) //nolint:errcheck

		return nil, 0, os.NewSyscallError("getsockname", err)
	}

	switch b := bound.(type) {
	case *syscall.SockaddrInet4:
		port = b.Port
	case *syscall.SockaddrInet6:
		port = b.Port
	}

	return os.NewFile(uintptr(fd), "reservation"), port, nil
}

// listenShared listens with SO_REUSEPORT (and Go's SO_REUSEADDR), next to a
// reservation of the same address.
func listenShared(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = os.NewSyscallError("setsockopt", syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1))
		}); err != nil {
			return err
		}

		return serr
	}}

	return lc.Listen(context.Background(), "tcp", addr)
}
