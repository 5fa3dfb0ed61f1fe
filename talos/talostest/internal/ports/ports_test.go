package ports_test

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
)

func TestPortReservation(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SO_REUSEPORT")
	}

	r, err := ports.Reserve("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() //nolint:errcheck

	if r.Port() == 0 {
		t.Fatal("no port picked")
	}

	refused := func(when string) {
		t.Helper()

		c, err := net.Dial("tcp", r.Addr())
		if err == nil {
			c.Close() //nolint:errcheck
			t.Fatalf("%s: connected", when)
		}

		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: %v, want connection refused", when, err)
		}
	}

	refused("reserved, nobody listening")

	// held: an ordinary listener cannot take the port
	if lis, err := net.Listen("tcp", r.Addr()); err == nil {
		lis.Close() //nolint:errcheck
		t.Fatal("a plain listener took the reserved port")
	}

	for i := range 2 { // listen, stop, listen again
		lis, err := r.Listen()
		if err != nil {
			t.Fatalf("listen %d: %v", i, err)
		}

		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatalf("listen %d: dial: %v", i, err)
		}

		c.Close()   //nolint:errcheck
		lis.Close() //nolint:errcheck
		refused("after the listener closed")
	}
}
