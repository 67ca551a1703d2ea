from rose_sql.cli import main

main()
