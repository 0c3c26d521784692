module github.com/ferrydev/ferry/ferrylog/ferrypgoutput

go 1.26.0
