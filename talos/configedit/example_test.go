package configedit_test

import (
	"fmt"

	"github.com/breakglass-dev/breakglass/talos/configedit"
)

func Example() {
	config := []byte(`version: v1alpha1
cluster:
    apiServer:
        extraArgs:
            enable-admission-plugins: NodeRestriction,ValidatingAdmissionWebhook # ours
            feature-gates: ServerSideApply=true
`)

	res, err := configedit.Disable(config, configedit.Options{Plugins: []string{"ValidatingAdmissionWebhook"}})
	if err != nil {
		panic(err)
	}

	fmt.Printf("method %s, taken out of the enable list: %v\n%s", res.Method, res.RemovedFromEnable, res.Config)

	back, err := configedit.Restore(res.Config, res.Record)
	if err != nil {
		panic(err)
	}

	fmt.Println("restored byte for byte:", string(back) == string(config))
	// Output:
	// method text, taken out of the enable list: [ValidatingAdmissionWebhook]
	// version: v1alpha1
	// cluster:
	//     apiServer:
	//         extraArgs:
	//             disable-admission-plugins: ValidatingAdmissionWebhook
	//             enable-admission-plugins: NodeRestriction # ours
	//             feature-gates: ServerSideApply=true
	// restored byte for byte: true
}
