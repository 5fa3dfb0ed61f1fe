//go:build !unix

package ports

import (
	"context"
	"net"
	"strconv"
)

// reserve picks a free port; without SO_REUSEPORT it cannot hold it.
func reserve(ip string, port int) (closer, int, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, 0, err
	}

	port = lis.Addr().(*net.TCPAddr).Port

	return nil, port, lis.Close()
}

func listenShared(addr string) (net.Listener, error) {
	return (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
}
