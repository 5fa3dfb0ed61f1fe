// Package cli provides a minimal framework for creating and organizing command line
// Go applications. cli is designed to be easy to understand and write, the most simple
// cli application can be written as follows:
//
//	func main() {
//		(&cli.App{}).Run(os.Args)
//	}
//
// Of course this application does not do much, so let's make this an actual application:
//
//	func main() {
//		app := &cli.App{
//	  		Name: "greet",
//	  		Usage: "say a greeting",
//	  		Action: func(c *cli.Context) error {
//	  			fmt.Println("Greetings")
//	  			return nil
//	  		},
//		}
//
//		app.Run(os.Args)
//	}
//
// This is a fork of github.com/urfave/cli/v2 v2.27.7 (MIT, LICENSE beside
// this file; what it changes, what it costs and the way out of it:
// README.md beside this file), copied file for file (tests, altsrc, the
// generators and the flag types breakglass never uses left out) into
// breakglass, with one change: the default help (help.go's
// printHelpCustom), the Markdown reference (docs.go's writeDocTemplate) and
// the fish completion (fish.go's writeFishCompletionTemplate) are written
// by Go code (render.go, render_docs.go) instead of by executing the
// templates of template.go, whose text they reproduce byte for byte
// (render_test.go, and cmd/breakglass's and cmd/breakglass-lab's tests over
// every command of both apps). A program whose linker can reach a template's
// execution keeps every exported method of every type it links (render.go
// says why); upstream has no switch for it (urfave/cli#2277), and a replace
// directive in go.mod would break go install. A custom help template
// (CustomAppHelpTemplate, CustomHelpTemplate, or a changed AppHelpTemplate)
// is not rendered: ErrWriter says so. The upstream rendering stays, as
// HelpFromTemplate, MarkdownFromTemplate and FishCompletionFromTemplate, for
// the tests.
package cli
