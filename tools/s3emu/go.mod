module skiff/tools/s3emu

go 1.19
