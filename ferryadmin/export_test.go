package ferryadmin

// SetWalkPage sets the page size of bulk walks for a test, so that a few
// thousand rows span several pages, and returns what restores it.
func SetWalkPage(n int) (restore func()) {
	old := walkPage
	walkPage = n
	return func() { walkPage = old }
}
