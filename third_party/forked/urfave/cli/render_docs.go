//go:build !urfave_cli_no_docs
// +build !urfave_cli_no_docs

package cli

// This file is breakglass's, not upstream's: see render.go.

import (
	"io"
	"strconv"
	"strings"
)

// writeDocTemplate writes what MarkdownDocTemplate gives.
func (a *App) writeDocTemplate(w io.Writer, sectionNum int) error {
	d := a.docTemplateData(sectionNum)
	var b strings.Builder
	if d.SectionNum > 0 {
		b.WriteString("% " + a.Name + " " + strconv.Itoa(d.SectionNum) + "\n\n")
	}
	b.WriteString("# NAME\n\n" + a.Name)
	if a.Usage != "" {
		b.WriteString(" - " + a.Usage)
	}
	b.WriteString("\n\n# SYNOPSIS\n\n" + a.Name + "\n")
	if len(d.SynopsisArgs) > 0 {
		b.WriteString("\n```\n" + strings.Join(d.SynopsisArgs, "") + "```\n")
	}
	if a.Description != "" {
		b.WriteString("\n# DESCRIPTION\n\n" + a.Description + "\n")
	}
	b.WriteString("\n**Usage**:\n\n```\n")
	if a.UsageText != "" {
		b.WriteString(a.UsageText + "\n")
	} else {
		b.WriteString(a.Name + " [GLOBAL OPTIONS] command [COMMAND OPTIONS] [ARGUMENTS...]\n")
	}
	b.WriteString("```\n")
	if len(d.GlobalArgs) > 0 {
		b.WriteString("\n# GLOBAL OPTIONS\n")
		for _, v := range d.GlobalArgs {
			b.WriteString("\n" + v)
		}
		b.WriteString("\n")
	}
	if len(d.Commands) > 0 {
		b.WriteString("\n# COMMANDS\n")
		for _, v := range d.Commands {
			b.WriteString("\n" + v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
