package machined

// Reading files off the node (sources: siderolabs/talos v1.13.8, v1alpha1_server.go Read
// and Copy, pkg/archiver): the node's /var (EPHEMERAL, where etcd's data is) and
// /system as the emulator holds them (Node.HostPath), and the boot ID talosctl reads to
// tell a reboot. Other paths are not emulated and say so (Unimplemented): the emulator
// would otherwise answer for files it does not have.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// bootIDPath is where Linux tells the current boot's ID.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// chunkSize is the size of the chunks machined's stream chunker sends.
const chunkSize = 1024

// nodeFile opens a file of the node: its host path, or the reason it cannot.
func (m *Machined) nodeFile(path string) (string, error) {
	host := m.host.Path(path)
	if host == "" {
		return "", status.Errorf(codes.Unimplemented, "%s is not emulated (only /var and /system, and %s)", path, bootIDPath)
	}

	return host, nil
}

// nodeError writes an error about a host path with the node's path instead.
func (m *Machined) nodeError(err error, path string) error {
	return errors.New(strings.ReplaceAll(err.Error(), m.host.Path(path), path))
}

// Read implements machine.MachineServiceServer.
func (s *machineService) Read(in *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	m := s.m
	send := func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) }

	if filepath.Clean(in.Path) == bootIDPath {
		_, id := m.boot()

		return send([]byte(id + "\n"))
	}

	host, err := m.nodeFile(in.Path)
	if err != nil {
		return err
	}

	st, err := os.Stat(host)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return status.Error(codes.NotFound, m.nodeError(err, in.Path).Error())
		}

		return m.nodeError(err, in.Path)
	}

	if !st.Mode().IsRegular() {
		return errors.New("path must be a regular file")
	}

	f, err := os.Open(host)
	if err != nil {
		return m.nodeError(err, in.Path)
	}
	defer f.Close() //nolint:errcheck

	return sendChunks(f, send)
}

// sendChunks streams r as machined's chunker does; a read error ends the stream
// without an error (TALOS.md).
func sendChunks(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, chunkSize)

	for {
		k, err := r.Read(buf)
		if k > 0 {
			if serr := send(bytes.Clone(buf[:k])); serr != nil {
				return serr
			}
		}

		if err != nil {
			return nil
		}
	}
}

// Copy implements machine.MachineServiceServer: the path as a .tar.gz (a file alone
// under its base name; a directory's contents relative to it), an archive error sent
// as a message carrying it, as machined does.
func (s *machineService) Copy(in *machine.CopyRequest, srv machine.MachineService_CopyServer) error {
	m := s.m
	path := filepath.Clean(in.RootPath)

	if !filepath.IsAbs(path) {
		return fmt.Errorf("path is not absolute %v", path)
	}

	host, err := m.nodeFile(path)
	if err != nil {
		return err
	}

	var archive bytes.Buffer

	if err := tarGz(srv.Context(), host, &archive); err != nil {
		if serr := sendChunks(&archive, func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) }); serr != nil {
			return serr
		}

		return srv.Send(&common.Data{Metadata: &common.Metadata{Error: m.nodeError(err, path).Error()}})
	}

	return sendChunks(&archive, func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) })
}

// tarGz is Talos's archiver.TarGz: the root skipped when it is a directory.
func tarGz(ctx context.Context, root string, out io.Writer) error {
	info, err := os.Lstat(root)
	if err != nil {
		return err
	}

	zw := gzip.NewWriter(out)
	tw := tar.NewWriter(zw)

	walkErr := filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}

		if ctx.Err() != nil {
			return ctx.Err()
		}

		name := filepath.Base(path)

		if info.IsDir() {
			if path == root {
				return nil
			}

			if name, err = filepath.Rel(root, path); err != nil {
				return err
			}
		}

		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}

		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}

		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}

		if !fi.Mode().IsRegular() {
			return nil
		}

		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close() //nolint:errcheck

		_, err = io.Copy(tw, io.LimitReader(f, hdr.Size))

		return err
	})

	if err := tw.Close(); err != nil && walkErr == nil {
		walkErr = err
	}

	if err := zw.Close(); err != nil && walkErr == nil {
		walkErr = err
	}

	return walkErr
}
