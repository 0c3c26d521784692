// Package nilness tells whether an interface value holds nothing usable: a
// plain nil, or a nil pointer, map, slice, function or channel in it (a
// "typed nil", which == nil does not catch). ferry's constructors refuse
// both, so that a failed Dial's nil publisher is an error at once rather
// than a panic in a background goroutine later.
package nilness

import "reflect"

// Nil reports whether v is nil or holds a nil pointer, map, slice,
// function, channel or interface.
func Nil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
