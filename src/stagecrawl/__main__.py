from stagecrawl.cli import main

main()
