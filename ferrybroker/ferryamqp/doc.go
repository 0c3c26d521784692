// Package ferryamqp publishes outbox events to RabbitMQ and consumes them.
package ferryamqp
