package configedit

// ValidatePlugins checks plugin names before any node is read, so bad input
// fails once, up front, instead of once per node.
func ValidatePlugins(plugins []string) error {
	_, err := validatePlugins(plugins)
	return err
}
