package encryption

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Key sizes kube-apiserver accepts (apis/apiserver/validation).
var (
	aesKeySizes       = []int{16, 24, 32}
	secretboxKeySizes = []int{32}
)

// Validate checks c as kube-apiserver checks its configuration before it
// starts (ValidateEncryptionConfiguration and the transformers' own checks):
// at least one rule, each with resources and providers; each keyed provider
// with keys, each key named, its secret base64 of a size the cipher takes;
// each KMS plugin named (without ':' from v2) with an apiVersion v1 or v2.
// The resource names themselves (overlaps, groups) are not checked. Errors
// never contain a secret.
func (c Config) Validate() error {
	var errs []error
	if len(c.Resources) == 0 {
		return errors.New("resources: at least one resources is required")
	}
	kmsNames := map[string]bool{}
	for i, r := range c.Resources {
		at := fmt.Sprintf("resources[%d]", i)
		if len(r.Resources) == 0 {
			errs = append(errs, fmt.Errorf("%s.resources: at least one resource is required", at))
		}
		if len(r.Providers) == 0 {
			errs = append(errs, fmt.Errorf("%s.providers: at least one provider is required", at))
		}
		for j, p := range r.Providers {
			errs = append(errs, p.validate(fmt.Sprintf("%s.providers[%d]", at, j), kmsNames)...)
		}
	}
	return errors.Join(errs...)
}

func (p Provider) validate(at string, kmsNames map[string]bool) []error {
	switch p.Type {
	case AESCBC, AESGCM:
		return validateKeys(at+"."+string(p.Type), p.Keys, aesKeySizes)
	case Secretbox:
		return validateKeys(at+".secretbox", p.Keys, secretboxKeySizes)
	case Identity:
		return nil
	case KMS:
		k := p.KMS
		if k == nil {
			return []error{fmt.Errorf("%s.kms: missing", at)}
		}
		var errs []error
		if k.APIVersion != "v1" && k.APIVersion != "v2" {
			errs = append(errs, fmt.Errorf("%s.kms.apiVersion: %q, only v1 and v2 are supported", at, k.APIVersion))
		}
		switch {
		case k.Name == "":
			errs = append(errs, fmt.Errorf("%s.kms.name: required", at))
		case k.APIVersion != "v1" && strings.Contains(k.Name, ":"):
			errs = append(errs, fmt.Errorf("%s.kms.name: %q must not contain ':'", at, k.Name))
		case k.APIVersion != "v1" && kmsNames[k.Name]:
			errs = append(errs, fmt.Errorf("%s.kms.name: duplicate KMS provider name %s", at, k.Name))
		}
		kmsNames[k.Name] = true
		if k.Endpoint == "" {
			errs = append(errs, fmt.Errorf("%s.kms.endpoint: required", at))
		}
		return errs
	}
	return []error{fmt.Errorf("%s: unknown provider %q", at, p.Type)}
}

func validateKeys(at string, keys []Key, sizes []int) []error {
	if len(keys) == 0 {
		return []error{fmt.Errorf("%s.keys: at least one key is required", at)}
	}
	var errs []error
	for i, k := range keys {
		kat := fmt.Sprintf("%s.keys[%d]", at, i)
		if k.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: required", kat))
		}
		if k.Secret.IsZero() {
			errs = append(errs, fmt.Errorf("%s.secret: required", kat))
			continue
		}
		raw, err := k.Secret.bytes()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.secret: secrets must be base64 encoded", kat))
			continue
		}
		if !slices.Contains(sizes, len(raw)) {
			errs = append(errs, fmt.Errorf("%s.secret: %d bytes, expected one of %v", kat, len(raw), sizes))
		}
	}
	return errs
}
