package main

// The example runs as it is: the message is committed with the order,
// relayed, and applied once although it is delivered twice.
func Example() {
	main()
	// Output:
	// user 7 has 10 points after 2 deliveries
}
