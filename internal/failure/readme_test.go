package failure

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The README's exit-code table is the whole truth: the same codes, in the
// same order, saying what Table says (the README adds only markdown).
func TestREADMEExitCodesAreTheTable(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "| code | meaning |\n| --- | --- |\n")
	if !ok {
		t.Fatal("README.md has no exit-code table")
	}
	row := regexp.MustCompile(`^\| (\d+) \| (.+) \|$`)
	var got []string
	for _, line := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		got = append(got, m[1]+" "+strings.ReplaceAll(m[2], "`", ""))
	}
	var want []string
	for _, e := range Table {
		want = append(want, strconv.Itoa(int(e.Category))+" "+e.What)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("README.md exit codes:\n%s\nfailure.Table:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
