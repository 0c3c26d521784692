module github.com/ferrydev/ferry/ferrystore/ferrymysql

go 1.24.0

require (
	github.com/ferrydev/ferry v0.1.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/stretchr/testify v1.12.1
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
