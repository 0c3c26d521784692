// Package ferrykafka publishes outbox events to Kafka with franz-go.
package ferrykafka
