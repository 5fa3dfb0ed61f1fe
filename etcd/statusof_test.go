package etcd_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// A member's status read at its own endpoint, not one of the client's; a
// member that does not listen is said so at once.
func TestStatusOf(t *testing.T) {
	cl := newCluster(t)
	ctx := context.Background()
	st := cl.c.StatusOf(ctx, cl.srv.Endpoints[0])
	if st.Error != "" || st.MemberID == 0 || st.Leader != st.MemberID || st.Revision == 0 {
		t.Fatalf("status %+v", st)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "https://" + l.Addr().String()
	l.Close()
	start := time.Now()
	st = cl.c.StatusOf(ctx, gone)
	if st.Error == "" || !strings.Contains(st.Error, l.Addr().String()) || time.Since(start) > 2*time.Second {
		t.Errorf("a member that does not listen: %+v after %s", st, time.Since(start))
	}
}
