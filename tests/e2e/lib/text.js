// Prompt text for the tests, written for them: plain story English, which the small
// TinyStories vocabulary of stories260K splits into many short tokens.
'use strict';

// 326 tokens of stories260K's vocabulary (with BOS: 327).
const STORY =
  'Once upon a time, in a small town near a big green hill, there lived a boy named Tom. ' +
  'Tom had a red ball and a little brown dog called Max. Every morning Tom and Max ran up ' +
  'the hill to play. One day the wind was very strong. Tom threw the ball high into the sky ' +
  'and the wind took it far away. Max barked and ran after it. Tom ran too, but he could not ' +
  'see the ball anywhere. Then a kind old lady came by with a basket of apples. She asked Tom ' +
  'why he was sad. Tom told her about the red ball. The lady smiled and said she had seen a ' +
  'red ball near the pond. Tom and Max went to the pond and found the ball floating on the ' +
  'water. Max jumped in and brought it back. Tom hugged his dog and thanked the lady.';

module.exports = { STORY };
