package lab

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
)

// CheckArgsRecord asks the binary again about the names in sample, and
// about everything its --help lists, and says where its answers differ
// from the record (nothing: they agree).
func CheckArgsRecord(ctx context.Context, bin string, rec *apiserverargs.Binary, sample ArgCandidates, workers int) ([]string, error) {
	if err := CheckBinaryVersion(bin, rec.Version); err != nil {
		return nil, err
	}
	p, err := newArgsProber(ctx, bin, "")
	if err != nil {
		return nil, err
	}
	defer p.close()
	help, err := ReadKubeHelp(ctx, bin)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var diffs []string
	differ := func(format string, a ...any) {
		mu.Lock()
		diffs = append(diffs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	words, err := p.words(ctx)
	if err != nil {
		return nil, err
	}
	if words != rec.Words {
		differ("words: the binary says %+v, the record %+v", words, rec.Words)
	}
	for f, typ := range help.Flags {
		if rf, ok := rec.Flag(f); !ok || rf.Hidden || (rf.Type != typ && f != "help" && f != "version") {
			differ("--help lists --%s (type %q); the record has %+v (known: %t)", f, typ, rf, ok)
		}
	}
	for _, rf := range rec.Flags {
		if _, listed := help.Flags[rf.Name]; listed == rf.Hidden {
			differ("--%s: --help lists it: %t; the record says hidden: %t", rf.Name, listed, rf.Hidden)
		}
	}
	for g, h := range help.Gates {
		rg, ok := rec.Gate(g)
		if !ok || rg.Stage != h.Stage || rg.Default == nil || *rg.Default != h.Default {
			differ("--help lists gate %s as %s, default %t; the record has %+v (known: %t)", g, h.Stage, h.Default, rg, ok)
		}
	}
	var jobs []func(context.Context) error
	for _, f := range sample.Flags {
		jobs = append(jobs, func(ctx context.Context) error {
			got, ok, err := p.flag(ctx, f, help.Flags)
			if err != nil {
				return err
			}
			want, wantOK := rec.Flag(f)
			if ok != wantOK || (ok && got != want) {
				differ("--%s: the binary says %+v (known: %t), the record %+v (known: %t)", f, got, ok, want, wantOK)
			}
			return nil
		})
	}
	for _, g := range sample.Gates {
		jobs = append(jobs, func(ctx context.Context) error {
			got, ok, err := p.gate(ctx, g, rec.Words, help.Gates)
			if err != nil {
				return err
			}
			want, wantOK := rec.Gate(g)
			if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
				differ("gate %s: the binary says %s (known: %t), the record %s (known: %t)", g, gateString(got), ok, gateString(want), wantOK)
			}
			return nil
		})
	}
	for _, gv := range sample.GroupVersions {
		jobs = append(jobs, func(ctx context.Context) error {
			got, err := p.runtimeConfig(ctx, gv)
			if err != nil {
				return err
			}
			if want := rec.RuntimeConfig(gv); !want.Unknown && got != want {
				differ("--runtime-config=%s=true: the binary says %+v, the record %+v", gv, got, want)
			}
			return nil
		})
	}
	if err := parallel(ctx, workers, len(jobs), func(ctx context.Context, i int) error { return jobs[i](ctx) }, nil); err != nil {
		return nil, err
	}
	sort.Strings(diffs)
	return diffs, nil
}

func gateString(g apiserverargs.Gate) string {
	b := func(p *bool) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("{stage %s default %s lockedTo %s true %+v false %+v}", g.Stage, b(g.Default), b(g.LockedTo), g.True, g.False)
}

// ArgsSample picks names to check a record with: the named ones, every
// stride-th recorded flag, gate and group version (from offset), and the
// names of the past no binary may know.
func ArgsSample(rec *apiserverargs.Binary, stride, offset int, named ArgCandidates) ArgCandidates {
	s := named
	if stride < 1 {
		stride = 1
	}
	for i := offset % stride; i < len(rec.Flags); i += stride {
		s.Flags = append(s.Flags, rec.Flags[i].Name)
	}
	for i := offset % stride; i < len(rec.Gates); i += stride {
		s.Gates = append(s.Gates, rec.Gates[i].Name)
	}
	for i := offset % stride; i < len(rec.GroupVersions); i += stride * 4 {
		s.GroupVersions = append(s.GroupVersions, rec.GroupVersions[i])
	}
	for i := offset % stride; i < len(pastFlags); i += stride {
		s.Flags = append(s.Flags, pastFlags[i])
	}
	for i := offset % stride; i < len(pastGroupVersions); i += stride * 2 {
		if g, _, _ := strings.Cut(pastGroupVersions[i], "/"); rec.RuntimeConfig(g + "/v1").Unknown {
			continue
		}
		s.GroupVersions = append(s.GroupVersions, pastGroupVersions[i])
	}
	return s.sorted()
}
