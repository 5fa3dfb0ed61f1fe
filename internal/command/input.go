package command

import (
	"io"
	"os"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// ReadInput reads the file a -f flag names; "-" is stdin. A file that
// cannot be read is bad input with hint as the next step.
func ReadInput(name string, stdin io.Reader, hint string) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, failure.Input(hint, "%v", err)
	}
	return data, nil
}
