"""Object storage for jobs: `s3://` locations (`locations`), the S3 client (`s3`, boto3: the
`s3` extra), presigned URLs (`presigned`), a job's inputs read at submit (`inputs`) and its
outputs written when it ends (`outputs`), errors as the API answers them (`errors`)."""
