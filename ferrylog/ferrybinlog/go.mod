module github.com/ferrydev/ferry/ferrylog/ferrybinlog

go 1.26.0

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/ferrydev/ferry v0.1.0
	github.com/ferrydev/ferry/ferrystore/ferrymysql v0.1.0
	github.com/go-mysql-org/go-mysql v1.13.0 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/stretchr/testify v1.12.1
)
