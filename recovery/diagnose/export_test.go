package diagnose

// ReadLogExcerpt is readLines for the external tests (e2e_test.go): one
// reader of the log excerpts under testdata/logs.
var ReadLogExcerpt = readLines
