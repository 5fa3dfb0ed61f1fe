package main

// Catalogue cases of the etcd commands (issue 13, the reviewer's gaps):
// unusable backup and snapshot destinations, and partial etcd credentials,
// each refused with the missing piece named (exit 2) before a journal is
// opened or etcd dialled. Cases that need odd data in etcd (names with
// escapes, keys not NAME-shaped) have their own etcd: etcd_names_test.go.

// etcdEnv reaches the catalogue's etcd through etcdctl's variables: a
// case's $DIR (its temporary directory, named after the case's arguments)
// must not hold "$ETCD", which would be replaced in it too.
var etcdEnv = map[string]string{"ETCDCTL_ENDPOINTS": "$ETCD", "ETCDCTL_CACERT": "$ETCDCA", "ETCDCTL_CERT": "$ETCDCERT", "ETCDCTL_KEY": "$ETCDKEY"}

// etcdEnvWithout is etcdEnv less the variables named.
func etcdEnvWithout(names ...string) map[string]string {
	env := map[string]string{}
	for k, v := range etcdEnv {
		env[k] = v
	}
	for _, n := range names {
		delete(env, n)
	}
	return env
}

// noTalosconfig makes a case run without a readable talosconfig: what an
// operator who means to reach etcd directly may well have.
var noTalosconfig = map[string]string{"TALOSCONFIG": "$DIR/absent"}

func init() {
	catalogue = append(catalogue,
		// --- backup and snapshot destinations: checked before anything is opened or dialled
		catCase{cmd: "etcd delete", class: "files", args: "etcd delete deadlock-webhook --backup-dir $DIR/file/sub --yes", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `backup directory .*file/sub cannot be created: .*file is a file`, hint: `give --backup-dir a directory .*or leave it out for the state directory's`},
		catCase{cmd: "etcd delete", class: "files", args: "etcd delete deadlock-webhook --backup-dir $DIR/file/a/b --dry-run", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `backup directory .*file/a/b cannot be created: .*file is a file`, hint: `--backup-dir`},
		catCase{cmd: "etcd backup", class: "files", args: "etcd backup --out $DIR/file/x.json", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `--out .*file/x\.json cannot be created: .*file is a file`, hint: `give --out a new file, e.g. --out ./etcd-backup.json, or leave it out`},
		catCase{cmd: "etcd backup", class: "files", args: "etcd backup --out $DIR/file/sub/x.json", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `--out .*file/sub/x\.json cannot be created: .*/file is a file`, hint: `--out`},
		catCase{cmd: "etcd backup", class: "files", args: "etcd backup --out $DIR/old.json", env: etcdEnv, files: map[string]string{"old.json": "{}"},
			code: 2, msg: `old\.json already exists: refusing to overwrite`, hint: `another file name`},
		catCase{cmd: "etcd backup", class: "files", args: "etcd backup --out $DIR", env: etcdEnv,
			code: 2, msg: `--out .* is a directory`, hint: `give --out a new file`},
		catCase{cmd: "etcd snapshot", class: "files", args: "etcd snapshot --out $DIR/file/snap.db", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `--out .*file/snap\.db cannot be created: .*file is a file`, hint: `--out ./etcd-snapshot\.db`},
		catCase{cmd: "etcd snapshot", class: "files", args: "etcd snapshot --out $DIR/snap.db", env: etcdEnv, files: map[string]string{"snap.db": "x"},
			code: 2, msg: `snap\.db already exists`, hint: `another file name`},
		catCase{cmd: "etcd delete", class: "state", args: "etcd delete deadlock-webhook --state-dir $DIR/file/sub --yes", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `state directory .*file/sub cannot be used`, hint: `--state-dir`},
		catCase{cmd: "etcd backup", class: "state", args: "etcd backup --state-dir $DIR/file", env: etcdEnv, files: map[string]string{"file": "x"},
			code: 2, msg: `state directory .*file is not a directory`, hint: `--state-dir`},

		// --- partial etcd credentials: the missing flag named, not "cannot read talosconfig"
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", env: noTalosconfig,
			code: 2, msg: `--etcd-cacert, --etcd-cert and --etcd-key given, but not --etcd-endpoints: without it .*talosconfig`, hint: `--etcd-endpoints https://HOST:2379`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-cacert $ETCDCA", env: noTalosconfig,
			code: 2, msg: `--etcd-cacert given, but not --etcd-endpoints, --etcd-cert and --etcd-key`, hint: `--etcd-endpoints https://HOST:2379 --etcd-cert FILE --etcd-key FILE`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD --etcd-cacert $ETCDCA", env: noTalosconfig,
			code: 2, msg: `--etcd-endpoints and --etcd-cacert given, but not --etcd-cert and --etcd-key: .*client certificate minted from the Talos etcd CA`, hint: `--etcd-cert FILE --etcd-key FILE`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD", env: noTalosconfig,
			code: 2, msg: `--etcd-endpoints given, but not --etcd-cacert, --etcd-cert and --etcd-key`, hint: `--etcd-cacert FILE --etcd-cert FILE --etcd-key FILE`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD --etcd-cert $ETCDCERT --etcd-key $ETCDKEY",
			code: 2, msg: `--etcd-cert and --etcd-key need --etcd-cacert`, hint: `--etcd-cacert FILE`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", env: noTalosconfig,
			code: 2, msg: `--etcd-cert and --etcd-key need --etcd-cacert`, hint: `--etcd-cacert FILE`},
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks", env: map[string]string{"TALOSCONFIG": "$DIR/absent", "ETCDCTL_CACERT": "$ETCDCA"},
			code: 2, msg: `--etcd-cacert given, but not --etcd-endpoints, --etcd-cert and --etcd-key`, hint: `--etcd-endpoints`},
		catCase{cmd: "etcd backup", class: "etcd", args: "etcd backup --out $DIR/b.json", env: etcdEnvWithout("ETCDCTL_CACERT"),
			code: 2, msg: `need --etcd-cacert`, hint: `--etcd-cacert FILE`},
		catCase{cmd: "etcd delete", class: "etcd", args: "etcd delete deadlock-webhook --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY --yes", env: noTalosconfig,
			code: 2, msg: `given, but not --etcd-endpoints`, hint: `--etcd-endpoints https://HOST:2379`},
		catCase{cmd: "etcd restore", class: "etcd", args: "etcd restore $DIR/absent.json --yes", env: etcdEnvWithout("ETCDCTL_CACERT"),
			code: 2, msg: `need --etcd-cacert`, hint: `--etcd-cacert`},
		catCase{cmd: "etcd snapshot", class: "etcd", args: "etcd snapshot --out $DIR/s.db", env: map[string]string{"TALOSCONFIG": "$DIR/absent", "ETCDCTL_ENDPOINTS": "$ETCD", "ETCDCTL_CACERT": "$ETCDCA"},
			code: 2, msg: `but not --etcd-cert and --etcd-key`, hint: `--etcd-cert FILE --etcd-key FILE`},
		catCase{cmd: "lock status", class: "etcd", args: "lock status --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", env: noTalosconfig,
			code: 2, msg: `given, but not --etcd-endpoints`, hint: `-n NODE|--etcd-endpoints`},
		catCase{cmd: "audit", class: "etcd", args: "audit --from-etcd --etcd-endpoints $ETCD --etcd-cacert $ETCDCA", env: noTalosconfig,
			code: 2, msg: `but not --etcd-cert and --etcd-key`, hint: `--etcd-cert FILE`},
		catCase{cmd: "diagnose", class: "etcd", args: "diagnose --etcd-endpoints $ETCD --etcd-cert $ETCDCERT --etcd-key $ETCDKEY",
			code: 2, msg: `need --etcd-cacert`, hint: `--etcd-cacert`},
		// http:// takes no certificates at all: not a partial set
		catCase{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints http://127.0.0.1:1 --etcd-cert $ETCDCERT --etcd-key $ETCDKEY",
			code: 2, msg: `certificates given for plain http:// endpoints`, hint: `.`},
		// no etcd flags: the talosconfig is the way, and its own error stays
		catCase{cmd: "etcd webhooks", class: "talosconfig", args: "etcd webhooks", env: noTalosconfig,
			code: 2, msg: `cannot read talosconfig .*absent`, hint: `--talosconfig PATH`},
	)
}
