package main

// The quickstart runs as it is: the event is committed, published, and
// applied once.
func Example() {
	main()
	// Output:
	// user 7 has 10 points
}
