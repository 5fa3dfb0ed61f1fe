package main

import (
	"fmt"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

func init() {
	commandRegistry = append(commandRegistry, completionCommand, docsCommand)
	declare("completion", commandSpec{args: takes(1, 1, "completion takes one shell: bash, zsh or fish", "breakglass completion bash|zsh|fish")})
}

// Completion scripts ask the binary itself (--generate-bash-completion), so
// they never fall behind the commands.
const bashCompletion = `# breakglass completion for bash: source <(breakglass completion bash)
_breakglass_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o bashdefault -o default -F _breakglass_complete breakglass
`

const zshCompletion = `#compdef breakglass
# breakglass completion for zsh: source <(breakglass completion zsh)
_breakglass() {
  local -a opts
  local cur=${words[CURRENT]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:$((CURRENT-1))} $cur --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:$((CURRENT-1))} --generate-bash-completion 2>/dev/null)}")
  fi
  _describe 'values' opts
}
compdef _breakglass breakglass
`

func completionCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "bash: source <(breakglass completion bash)\n" +
			"zsh:  source <(breakglass completion zsh)\n" +
			"fish: breakglass completion fish | source",
		Action: func(c *cli.Context) error {
			switch c.Args().First() {
			case "bash":
				_, err := fmt.Fprint(s.Out, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(s.Out, zshCompletion)
				return err
			case "fish":
				script, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(s.Out, script)
				return err
			}
			return failure.Input("breakglass completion bash|zsh|fish", "unknown shell %q", c.Args().First())
		},
	}
}

// docsCommand writes docs/commands.md (a test checks it is current).
func docsCommand(s streams) *cli.Command {
	return command.Docs(s.Out, referenceGenerator, func() *cli.App { return newApp(s) })
}

const referenceGenerator = "breakglass docs docs/commands.md"
