// Package token makes the random tokens that fence claims and name relays,
// and cuts text to the bounded columns that keep them. It imports nothing
// of ferry's, so that the root package takes it without the shared SQL of
// the stores.
package token

import (
	"crypto/rand"
	"encoding/hex"
	"unicode/utf8"
)

// New returns a fresh random token: 32 lowercase hex characters (128 bits
// from crypto/rand).
func New() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Truncate shortens s to at most n bytes for storage in a bounded column,
// keeping valid UTF-8: a character the cut would split is left out whole.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Drop the bytes of a character the cut split (at most 3).
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
