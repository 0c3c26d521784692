package ferryadmin_test

import (
	"fmt"

	"github.com/ferrydev/ferry/ferryadmin"
)

// ErrorClass turns error texts that differ only in ids, numbers, quoted
// names and durations into one class.
func ExampleErrorClass() {
	for _, e := range []string{
		`attempt 20: returned: nats: no stream matches subject "orders.paid.1"`,
		`attempt 19: returned: nats: no stream matches subject "orders.paid.2"`,
		"attempt 5: dial tcp 10.0.0.7:4222: i/o timeout after 30s",
	} {
		fmt.Println(ferryadmin.ErrorClass(e))
	}
	// Output:
	// attempt <n>: returned: nats: no stream matches subject "<s>"
	// attempt <n>: returned: nats: no stream matches subject "<s>"
	// attempt <n>: dial tcp <n>:<n>: i/o timeout after <d>
}
