package ferrypg

// PayloadsTrusted reports whether s's claims learnt that the payload
// column is json or jsonb, and stopped checking each payload.
func PayloadsTrusted(s *StdlibStore) bool { return s.payloadType.Load() == payloadJSON }
