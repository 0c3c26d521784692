module github.com/ferrydev/ferry/ferrylog/ferrybinlog

go 1.26.0
