// The OpenID provider of Gantry's sign-in tests: `oidc-provider` (a
// certified OpenID Connect implementation, from npm), on loopback, with its
// own development sign-in and consent forms (any password is taken).
//
// Settings come from the environment:
//   OIDC_PROVIDER_MODULE  the package's entry file (installed by scripts/test.sh)
//   PORT                  the port to listen on (the issuer is http://127.0.0.1:PORT)
//   REDIRECT_URIS         the client's redirect URIs, comma-separated
//   ACCOUNTS              JSON: login name -> the groups the provider says it is in
// The client is `gantry` with the secret `gantry-secret`. Prints "listening ISSUER".
const { default: Provider } = await import(process.env.OIDC_PROVIDER_MODULE);

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.ACCOUNTS || "{}");

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: "gantry",
      client_secret: "gantry-secret",
      redirect_uris: process.env.REDIRECT_URIS.split(","),
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
  ],
  // The groups are the userinfo endpoint's (conformIdTokenClaims keeps
  // scope-requested claims out of the ID token, as many providers do).
  claims: {
    openid: ["sub"],
    profile: ["preferred_username", "name"],
    groups: ["groups"],
  },
  scopes: ["openid", "profile", "email", "groups"],
  cookies: { keys: ["gantry-test-cookie-key"] },
  pkce: { required: () => true },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          preferred_username: id,
          name: id,
          groups: accounts[id] || [],
        };
      },
    };
  },
});

provider.listen(port, "127.0.0.1", () => {
  console.log(`listening ${issuer}`);
});
