// Package staticpod is the kube-apiserver static pod between machined and the kubelet:
// the manifest machined's static pod controller renders into the StaticPod resource,
// and the container the kubelet reads back from it and runs.
package staticpod

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// Binary is the command Talos puts first in the container's command line.
const Binary = "/usr/local/bin/kube-apiserver"

// ConfigVersionAnnotation carries the APIServerConfig version the manifest was rendered
// from: the kubelet derives a static pod's UID from the whole manifest, so a new
// version is a new pod even with the same container.
const ConfigVersionAnnotation = "talos.dev/config-version"

// SecretsVersionAnnotation carries the version of the files rendered into
// kube-apiserver's secrets directory (encryptionconfig.yaml among them), as
// Talos's ControlPlaneStaticPodController sets it: a change of them is a
// new pod.
const SecretsVersionAnnotation = "talos.dev/secrets-version"

// ContainerConfig is the rendered kube-apiserver container: what the kubelet runs.
type ContainerConfig struct {
	Image   string
	Command []string // Binary followed by the flags, sorted like Talos renders them
}

// Args returns the flags (the command without the binary).
func (c ContainerConfig) Args() []string {
	if len(c.Command) == 0 {
		return nil
	}

	return c.Command[1:]
}

// Flag returns the value of --name; repeated flags are joined with commas.
func (c ContainerConfig) Flag(name string) (string, bool) {
	var vals []string

	for _, a := range c.Args() {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			vals = append(vals, v)
		}
	}

	return strings.Join(vals, ","), len(vals) > 0
}

// Equal tells whether two containers run the same image with the same command.
func (c ContainerConfig) Equal(o ContainerConfig) bool {
	return c.Image == o.Image && slices.Equal(c.Command, o.Command)
}

// FlagHas reports whether the comma-separated flag --name holds value.
func FlagHas(c ContainerConfig, name, value string) bool {
	v, ok := c.Flag(name)

	return ok && slices.Contains(strings.Split(v, ","), value)
}

// Manifest renders the kube-apiserver pod the way Talos writes it into the StaticPod
// resource (a v1.Pod converted to a map).
func Manifest(c ContainerConfig, configVersion string, secretsVersion ...string) (map[string]any, error) {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      k8s.APIServerID,
			Namespace: "kube-system",
			Annotations: map[string]string{
				ConfigVersionAnnotation: configVersion,
			},
			Labels: map[string]string{
				"tier":                         "control-plane",
				"k8s-app":                      k8s.APIServerID,
				"component":                    k8s.APIServerID,
				"app.kubernetes.io/name":       k8s.APIServerID,
				"app.kubernetes.io/component":  "control-plane",
				"app.kubernetes.io/managed-by": "Talos",
			},
		},
		Spec: corev1.PodSpec{
			PriorityClassName: "system-cluster-critical",
			HostNetwork:       true,
			Containers: []corev1.Container{{
				Name:    k8s.APIServerID,
				Image:   c.Image,
				Command: c.Command,
				Env: []corev1.EnvVar{{
					Name:      "POD_IP",
					ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
				}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "secrets", MountPath: constants.KubernetesAPIServerSecretsDir, ReadOnly: true},
					{Name: "config", MountPath: constants.KubernetesAPIServerConfigDir, ReadOnly: true},
					{Name: "audit", MountPath: constants.KubernetesAuditLogDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "secrets", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: constants.KubernetesAPIServerSecretsDir}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: constants.KubernetesAPIServerConfigDir}}},
				{Name: "audit", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: constants.KubernetesAuditLogDir}}},
			},
		},
	}

	if len(secretsVersion) > 0 && secretsVersion[0] != "" {
		pod.Annotations[SecretsVersionAnnotation] = secretsVersion[0]
	}

	return runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
}

// Read is the kubelet reading a manifest it fetched: the kube-apiserver container and
// the config version the manifest carries.
func Read(manifest map[string]any) (ContainerConfig, string, error) {
	var pod corev1.Pod

	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(manifest, &pod); err != nil {
		return ContainerConfig{}, "", fmt.Errorf("decoding the static pod: %w", err)
	}

	for _, c := range pod.Spec.Containers {
		if c.Name == k8s.APIServerID {
			version := pod.Annotations[ConfigVersionAnnotation]
			if sv := pod.Annotations[SecretsVersionAnnotation]; sv != "" {
				version += "/" + sv
			}

			return ContainerConfig{Image: c.Image, Command: c.Command}, version, nil
		}
	}

	return ContainerConfig{}, "", fmt.Errorf("static pod %s has no container %s", pod.Name, k8s.APIServerID)
}
