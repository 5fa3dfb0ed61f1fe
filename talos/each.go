package talos

import "sync"

// EachNode calls f for every node at once and gives each node's result and
// error in node order: the one fan-out of a per-node read or change.
func EachNode[T any](nodes []string, f func(node string) (T, error)) ([]T, []error) {
	out := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { out[i], errs[i] = f(n) })
	}
	wg.Wait()
	return out, errs
}

// Failed are the errors of the nodes that failed, in node order.
func Failed(errs []error) []error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
