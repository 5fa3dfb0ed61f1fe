package configedit

import "testing"

func TestSmoke(t *testing.T) {
	in := generatedConfig(t)
	res, err := Disable(in, Options{Plugins: []string{"ValidatingAdmissionWebhook"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("method %s changed %d\n%+v", res.Method, changedLines(in, res.Config), res.Record)
	back, err := Restore(res.Config, res.Record)
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != string(in) {
		t.Fatal("not exact")
	}
	for _, c := range []string{
		"cluster:\n  apiServer:\n    extraArgs:\n      a: b\n      enable-admission-plugins: ValidatingAdmissionWebhook\n      c: d\n",
		"cluster:\n  apiServer:\n    extraArgs: {a: b, enable-admission-plugins: [ValidatingAdmissionWebhook, X1]}\n",
		"cluster:\n  apiServer:\n    extraArgs:\n      disable-admission-plugins:\n        - A1\n        - 'B1'\n",
		"cluster:\n  apiServer: {}\n",
		"cluster:\n  clusterName: x\n",
	} {
		res, err := Disable([]byte(c), Options{Plugins: []string{"ValidatingAdmissionWebhook"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("method %s\n%s", res.Method, res.Config)
		back, err := Restore(res.Config, res.Record)
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != c {
			t.Fatalf("not exact:\n%s", back)
		}
	}
}
