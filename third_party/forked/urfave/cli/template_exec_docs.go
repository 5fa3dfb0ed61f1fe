//go:build !urfave_cli_no_docs
// +build !urfave_cli_no_docs

package cli

// This file is breakglass's, not upstream's: see render.go.

import "bytes"

// MarkdownFromTemplate is ToMarkdown (sectionNum 0) or the Markdown under
// ToManWithSection as upstream renders it, with text/template; for tests
// only, as HelpFromTemplate.
func MarkdownFromTemplate(a *App, sectionNum int) (string, error) {
	var w bytes.Buffer
	if err := a.executeDocTemplate(&w, sectionNum); err != nil {
		return "", err
	}
	return w.String(), nil
}
