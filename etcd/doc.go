// Package etcd performs surgery on the admission objects that kube-apiserver
// keeps in etcd, for when the API server itself cannot start.
//
// Everything here follows the same safety contract: keys are never guessed
// (the prefix is listed and every value decoded), a key is deleted only after
// its backup has been written atomically, read back and verified, and only in
// one transaction guarded by the mod revision that was backed up; a restore
// only creates keys that are absent. Writes go through a Writer, so a dry run
// is a property of the writer handed in, not of the caller.
package etcd
