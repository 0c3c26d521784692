package ferryfault_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/ferryfault"
)

// A test arms a fault point through the context it starts a part with;
// the part calls At at each of its points.
func Example() {
	crash := errors.New("crashed here")
	ctx := ferryfault.With(context.Background(), func(_ context.Context, point string) error {
		if point == ferryfault.RelayAfterPublish {
			return crash
		}
		return nil
	})
	fmt.Println(ferryfault.At(ctx, ferryfault.RelayAfterClaim))
	fmt.Println(ferryfault.At(ctx, ferryfault.RelayAfterPublish))
	fmt.Println(ferryfault.At(context.Background(), ferryfault.RelayAfterPublish))
	// Output:
	// <nil>
	// crashed here
	// <nil>
}
