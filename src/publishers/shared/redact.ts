/** A URL for error messages, without any user:password part. */
export function redactCredentials(url: string): string {
  return url.replace(/\/\/[^/@]*@/, '//***@');
}
