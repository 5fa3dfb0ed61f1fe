module github.com/containerd/go-cni

go 1.21
