package encryption

import "crypto/sha256"

// Recording is what one kube-apiserver version did, shape by shape, when
// the Secrets it wrote under one encryption configuration no longer
// decrypted after a restart under another (lab/recordencryption, real
// binaries, a real etcd; kept in testdata/recorded/VERSION.json, which
// holds the wordings to them).
type Recording struct {
	Version  string  `json:"version"`
	Recorded string  `json:"recorded"` // the date
	Command  string  `json:"command"`  // what re-records it
	Keys     string  `json:"keys"`     // how the keys come from their labels
	Shapes   []Shape `json:"shapes"`
}

// Shape is one way stored data stops decrypting, and what kube-apiserver
// did then.
type Shape struct {
	Name   string         `json:"shape"`
	What   string         `json:"what"`
	Cause  Cause          `json:"cause"`  // what kube-apiserver's words should tell
	Before []ProviderSpec `json:"before"` // the configuration the Secrets were written under
	After  []ProviderSpec `json:"after"`  // the one kube-apiserver restarted with
	// StoredKey and StoredValue are one of the Secrets as etcd holds it.
	StoredKey   string `json:"storedKey"`
	StoredValue []byte `json:"storedValue"`

	Ready      bool     `json:"ready"`                // After's /readyz said 200
	ReadyAfter string   `json:"readyAfter,omitempty"` // from its start
	Failing    []string `json:"failing,omitempty"`    // /readyz checks failing at the end
	Exited     string   `json:"exited,omitempty"`     // it exited by itself: how
	Get        string   `json:"get"`                  // GET of that Secret through the API
	List       string   `json:"list"`                 // LIST of every Secret
	// Lines are its log lines about it, each once, klog's header cut to
	// the severity and the source line.
	Lines []string `json:"lines"`
}

// ProviderSpec is a provider whose keys are named by a label: each key is
// RecordingKey(label), public, for recordings and tests only.
type ProviderSpec struct {
	Provider ProviderType `json:"provider"`
	Keys     []KeySpec    `json:"keys,omitempty"`
}

// KeySpec is a key's name and the label its secret comes from.
type KeySpec struct {
	Name  string `json:"name"`
	Label string `json:"label"`
}

// RecordingKeys says how a recording's keys are made.
const RecordingKeys = `secret = sha256("breakglass test key " + label): public keys, for recordings and tests only`

// RecordingKey is the public 32-byte key of a label (RecordingKeys).
func RecordingKey(label string) Secret {
	k := sha256.Sum256([]byte("breakglass test key " + label))
	return SecretOf(k[:])
}

// Specs is the configuration of the providers, for Secrets only, as the
// recorder writes it.
func Specs(specs []ProviderSpec) Config {
	ps := make([]Provider, len(specs))
	for i, s := range specs {
		ps[i] = Provider{Type: s.Provider}
		for _, k := range s.Keys {
			ps[i].Keys = append(ps[i].Keys, Key{Name: k.Name, Secret: RecordingKey(k.Label)})
		}
	}
	return Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: ps}}}
}
