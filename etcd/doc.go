// Package etcd performs surgery on the admission objects that kube-apiserver
// keeps in etcd, for when the API server itself cannot start, and the
// maintenance that gets a full etcd (the NOSPACE alarm) writing again.
//
// Everything here follows the same safety contract: keys are never guessed
// (the prefix is listed and every value decoded), a key is deleted only after
// its backup has been written atomically, read back and verified, and only in
// one transaction guarded by the mod revision that was backed up; a restore
// only creates keys that are absent. Writes go through a Writer, so a dry run
// is a property of the writer handed in, not of the caller: compaction,
// disarming an alarm and the write probe too.
//
// For a full etcd: Usage reads what the keys weigh, by resource and
// namespace, page by page (memory about one page, whatever the database's
// size), beside the members' database sizes; Status, Alarms, Compact,
// DisarmNoSpace and ProbeWrite do the rest but the defragmentation, which
// goes through the Talos API one member at a time. A write etcd refuses for
// lack of space is a *NoSpaceError (IsNoSpace also reads it as text).
//
// Benchmarks: BenchmarkUsage builds its database once per process, of
// BREAKGLASS_BENCH_ETCD_BYTES bytes of keys and values (default 64 MiB,
// enough for CI; 1e9 takes about 3 minutes to load on 2 cores); with
// BREAKGLASS_BENCH_ETCD_DIR the database is kept there and reused by the
// next run of the same size. For example
//
//	BREAKGLASS_BENCH_ETCD_BYTES=1e9 BREAKGLASS_BENCH_ETCD_DIR=/tmp/usage-1g go test -run '^$' -bench Usage -benchtime 2x ./etcd/
package etcd
