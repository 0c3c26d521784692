package nilness

import (
	"io"
	"strings"
	"testing"
)

type value struct{}

func (value) Read([]byte) (int, error) { return 0, io.EOF }

func TestNil(t *testing.T) {
	var r *strings.Reader
	var typed io.Reader = r
	var f func()
	var m map[string]int
	for _, c := range []struct {
		name string
		v    any
		want bool
	}{
		{"plain nil", nil, true},
		{"nil pointer in an interface", typed, true},
		{"nil func", f, true},
		{"nil map", m, true},
		{"pointer", strings.NewReader("x"), false},
		{"struct value", value{}, false},
		{"zero int", 0, false},
		{"empty string", "", false},
	} {
		if got := Nil(c.v); got != c.want {
			t.Errorf("%s: Nil = %v, want %v", c.name, got, c.want)
		}
	}
}
