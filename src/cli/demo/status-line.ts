/** One status line: overwritten in place on a terminal, plain lines otherwise. */
export class StatusLine {
  private readonly tty = process.stdout.isTTY === true;
  private open = false;

  show(text: string): void {
    if (this.tty) {
      process.stdout.write(`\r\x1b[K${text}`);
      this.open = true;
    } else {
      process.stdout.write(`${text}\n`);
    }
  }

  /** Ends an overwritten line so that what follows starts on its own line. */
  end(): void {
    if (this.open) process.stdout.write('\n');
    this.open = false;
  }
}
